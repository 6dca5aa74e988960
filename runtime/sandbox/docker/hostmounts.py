"""Make the workspaces root ``nosuid,nodev`` so every workspace bind mount inherits it.

Docker's bind mounts cannot set ``nosuid``/``nodev`` themselves, but a bind mount inherits the
flags of the mount its source lives on. So at start-up (when root) the backend turns the
workspaces root into a bind mount of itself and remounts it ``nosuid,nodev``:

    mount --rbind R R && mount -o remount,bind,nosuid,nodev R

(recursive: session disks already mounted below R stay visible through it)

A read-write workspace bind then shows ``rw,nosuid,nodev`` inside the container. (A read-only
bind loses them with runc 1.1.5; no-new-privileges and the missing CAP_MKNOD cover that.)
Idempotent: nothing happens when the root already is ``nosuid,nodev``. ``navi doctor`` reports
the state via ``mount_options``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Literal

from runtime.errors import SandboxError
from runtime.logging import get_logger

log = get_logger(__name__)

HardenState = Literal["already", "remounted", "not_root"]


def _unescape(field: str) -> str:
    return (
        field.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
    )


def mount_options(path: Path) -> tuple[str, set[str]]:
    """(mount point, per-mount options) of the mount ``path`` lives on."""
    target = os.path.realpath(path)
    best = ("/", set[str]())
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) < 6:
                continue
            point = _unescape(fields[4])
            inside = target == point or target.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best[0]):
                best = (point, set(fields[5].split(",")))
    return best


def is_nosuid_nodev(path: Path) -> bool:
    return {"nosuid", "nodev"} <= mount_options(path)[1]


def ensure_nosuid_nodev(root: Path) -> HardenState:
    """Bind-remount ``root`` with nosuid,nodev when needed and possible (root only)."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if is_nosuid_nodev(root):
        return "already"
    if os.geteuid() != 0:
        log.warning("workspaces_root_not_hardened", root=str(root), reason="not running as root")
        return "not_root"
    real = os.path.realpath(root)
    commands = []
    if mount_options(root)[0] != real:
        commands.append(["mount", "--rbind", real, real])  # keep session disks under it
    commands.append(["mount", "-o", "remount,bind,nosuid,nodev", real])
    for command in commands:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SandboxError(
                f"cannot make the workspaces root {real} nosuid,nodev: {done.stderr.strip()}"
            )
    if not is_nosuid_nodev(root):
        raise SandboxError(f"the workspaces root {real} is still not nosuid,nodev after remount")
    log.info("workspaces_root_hardened", root=real, options="nosuid,nodev")
    return "remounted"


def release_nosuid_nodev(root: Path, state: HardenState | None) -> None:
    """Undo our bind mount at shutdown (only if we made it), so the data dir stays removable."""
    if state != "remounted":
        return
    done = subprocess.run(
        ["umount", "--lazy", os.path.realpath(root)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        log.warning("workspaces_root_release_failed", root=str(root), error=done.stderr.strip())
