"""The first admin: from `NAVI_ADMIN_TOKEN`, else a token generated once into the data dir.

A fresh `make run` must be usable without reading any code: with no `NAVI_ADMIN_TOKEN` set,
the supervisor creates `<data_dir>/admin-token` (mode 0600) at first start and logs its path
(never the token). Later starts reuse that file. Setting `NAVI_ADMIN_TOKEN` takes precedence
(and rotating it revokes the previous bootstrap token; see `Store.ensure_bootstrap_admin`).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from runtime.config import Settings
from runtime.errors import ConfigError
from runtime.logging import get_logger
from runtime.store import Store

log = get_logger(__name__)

TOKEN_FILE = "admin-token"


def _read_or_create(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        token = "navi_" + secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        log.warning("admin_token_created", path=str(path),
                    hint=f"sign in with the token in {path}")
        return token
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    with os.fdopen(fd) as fh:
        token = fh.read().strip()
    if not token:
        raise ConfigError(f"{path} is empty; delete it to have a new admin token made")
    return token


async def ensure_admin(settings: Settings, store: Store) -> None:
    if settings.admin_token is not None:
        await store.ensure_bootstrap_admin(settings.admin_token.get_secret_value())
        return
    token = _read_or_create(settings.data_dir / TOKEN_FILE)
    await store.ensure_bootstrap_admin(token)
    log.info("admin_token_file", path=str(settings.data_dir / TOKEN_FILE))
