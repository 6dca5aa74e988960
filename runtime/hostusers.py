"""Which uids the host's accounts use, so that no sandbox or model server ever runs as one.

On a plain host that is the supervisor's own account database (``pwd``: /etc/passwd and any
NSS source). Under docker-compose the supervisor runs in a container whose /etc/passwd is the
image's, not the host's: there the host's file is mounted read-only and named by
``NAVI_HOST_PASSWD`` (compose uses /host/etc/passwd), and a uid is a host uid when either
lists it. A named file that cannot be read fails closed (``ConfigError``): no uid is handed
out on a guess.
"""

from __future__ import annotations

import pwd
from pathlib import Path

from runtime.errors import ConfigError


def passwd_uids(path: Path) -> set[int]:
    """The uids a passwd(5) file lists (malformed lines are skipped)."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read the host's passwd file {path} (NAVI_HOST_PASSWD): "
                          f"{exc.strerror}") from None
    uids: set[int] = set()
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and not line.startswith("#") and fields[2].isdigit():
            uids.add(int(fields[2]))
    return uids


def host_has_uid(uid: int, passwd: Path | None = None) -> bool:
    """A uid some host account uses: a sandbox (or the model server) must never run as it."""
    if passwd is not None and uid in passwd_uids(passwd):
        return True
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def checked_against(passwd: Path | None) -> str:
    """What `host_has_uid` consults, for `navi doctor` and the logs."""
    if passwd is None:
        return "this system's accounts (pwd: /etc/passwd and NSS)"
    return f"{passwd} (NAVI_HOST_PASSWD, {len(passwd_uids(passwd))} accounts) and this system's"
