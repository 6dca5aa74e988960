"""Reading the mount table and releasing mounts: shared by session disks, their guard and
start-up reconciliation (``/proc/self/mountinfo`` escapes spaces and such as octal)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from pathlib import Path

FITHAW = 0xC0045878  # _IOWR('X', 120, int)


def _unescape(field: str) -> str:
    return (field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")
            .replace("\\134", "\\"))


def mounts_under(root: Path | str) -> list[str]:
    """Mount points at or below ``root`` (its real path), as listed in this namespace."""
    base = os.path.realpath(root).rstrip("/")
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) > 4:
                point = _unescape(fields[4])
                if point == base or point.startswith(base + "/"):
                    found.append(point)
    return found


def thaw(point: str) -> None:
    """Thaw the filesystem at ``point`` if a snapshot's copy left it frozen (its process
    died mid-copy: ``runtime.workspace.image_copy``); its writers would wait forever."""
    with contextlib.suppress(OSError):  # EINVAL: not frozen
        fd = os.open(point, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fcntl.ioctl(fd, FITHAW, 0)
        finally:
            os.close(fd)


def release(point: str) -> bool:
    """Detach a mount (lazily: busy mounts go once their last user leaves), thawed first; a
    loop device mounted with ``-o loop`` is freed with it (autoclear)."""
    thaw(point)
    done = subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)
    return done.returncode == 0


def release_all_under(root: Path | str) -> int:
    points = mounts_under(root)
    for point in sorted(points, key=len, reverse=True):
        release(point)
    return len(points)
