"""The supervisor instance id: which containers on a shared engine are ours.

Several supervisors may share one Docker engine. Every container we create carries the label
``navi.instance=<id>``; the reaper and the start-up reconcile only ever touch containers with
our id. The id is generated once and kept in ``<data_dir>/instance_id`` so that a restarted
supervisor (same data dir) recognises the containers its crashed predecessor left behind.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

from runtime.errors import ConfigError

INSTANCE_FILE = "instance_id"
INSTANCE_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{7,63}$")


def new_instance_id() -> str:
    return f"navi-{secrets.token_hex(8)}"


def load_instance_id(data_dir: Path) -> str:
    """Return the id kept in ``data_dir``; create it (atomically, once) when missing."""
    path = data_dir / INSTANCE_FILE
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as fh:
            fh.write(new_instance_id() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ConfigError(f"cannot read the instance id file {path}: {exc.strerror}") from exc
    with os.fdopen(fd) as fh:
        value = fh.read(128).strip()
    if not INSTANCE_ID_RE.fullmatch(value):
        raise ConfigError(
            f"{path} does not hold a valid instance id (lowercase letters, digits, '-', 8-64)"
        )
    return value
