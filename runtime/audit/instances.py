"""Who has a data dir's audit log open: one ``flock``'d file per instance.

Every process holds an exclusive lock on ``audit.instances/<instance>.lock`` while its
``AuditLog`` is open; the kernel drops it when the process ends, however it ends. So a free
lock means the instance is gone: crash recovery closes only such instances' intents
(``instance_alive``), and backup/restore asks who is live (``live_instances``) or holds an
instance's lock itself (``lock_instance``) to keep a server with that id out.
Blocking calls: run them in a worker thread from async code.
"""

from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path

from runtime.audit.layout import INSTANCES_DIR

__all__ = ["INSTANCE_ID", "instance_alive", "live_instances", "lock_instance",
           "release_instance"]
INSTANCE_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def _lock_path(data_dir: Path, instance: str) -> Path:
    return data_dir / INSTANCES_DIR / f"{instance}.lock"


def lock_instance(data_dir: Path, instance: str) -> int | None:
    """Hold ``instance``'s lock (as an open audit log does); the fd (close it to release),
    None if another process holds it."""
    folder = data_dir / INSTANCES_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(_lock_path(data_dir, instance), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def release_instance(data_dir: Path, instance: str, fd: int) -> None:
    """A clean close: nothing of ours is in flight, so the lock file goes, then the lock."""
    try:
        _lock_path(data_dir, instance).unlink()
    except OSError:
        pass
    os.close(fd)


def instance_alive(data_dir: Path, instance: str | None) -> bool:
    """Whether another process holds ``instance``'s lock now (an unknown or malformed id is
    not alive)."""
    if instance is None or not INSTANCE_ID.fullmatch(instance):
        return False
    try:
        fd = os.open(_lock_path(data_dir, instance), os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def live_instances(data_dir: Path) -> list[str]:
    """Instances (servers, ``navi exec``) that have this data dir's audit log open now."""
    folder = data_dir / INSTANCES_DIR
    if not folder.is_dir():
        return []
    alive = []
    for path in sorted(folder.glob("*.lock")):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            alive.append(path.stem)
        finally:
            os.close(fd)
    return alive
