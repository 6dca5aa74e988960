"""Where a session's kernels keep their state: on the session's own disk.

    <session dir>/kernels/            root, 0711 (mounted in no container)
                 <name>.json          the supervisor's record: state, started_at, last_used_at
                 <name>/              the sandbox user's, 0700; bound at /run/navi/kernel in
                                      that kernel's container, and nowhere else
                       state.pkl      the saved names (written and read only inside it)

Being on the session's disk, saved state counts in its quota, goes with its snapshots and
forks and outlives a restart. The supervisor reads only its own records and whether
``state.pkl`` exists: never its content (it is tenant-written pickle data).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import time
from pathlib import Path

from pydantic import BaseModel, ValidationError

from runtime.kernels.models import KERNEL_NAME, KernelInfo

KERNELS = "kernels"
STATE_FILE = "state.pkl"


class KernelRecord(BaseModel):
    state: str  # "running" (a container was started) | "saved"
    started_at: float | None = None
    last_used_at: float | None = None


def kernels_dir(session_dir: Path) -> Path:
    return session_dir / KERNELS


def state_dir(session_dir: Path, name: str, uid: int) -> Path:
    """The kernel's directory, made if missing (the sandbox user's, 0700)."""
    root = kernels_dir(session_dir)
    with contextlib.suppress(FileExistsError):
        os.mkdir(root, 0o711)
    if root.is_symlink() or not root.is_dir():
        raise OSError(f"{root} is not a directory")
    path = root / name
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{path} is not a directory")
    if os.geteuid() == 0 and (st.st_uid, st.st_gid) != (uid, uid):
        os.chown(path, uid, uid, follow_symlinks=False)
    return path


def has_saved_state(session_dir: Path, name: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(kernels_dir(session_dir) / name / STATE_FILE).st_mode)
    except OSError:
        return False


def saved_since_start(session_dir: Path, name: str) -> bool:
    """Whether ``state.pkl`` was written after the kernel's record (its last start): a
    kernel whose server died saved its names when its stdin ended."""
    root = kernels_dir(session_dir)
    try:
        written = os.lstat(root / name / STATE_FILE)
        started = os.lstat(root / f"{name}.json")
    except OSError:
        return False
    return stat.S_ISREG(written.st_mode) and written.st_mtime_ns > started.st_mtime_ns


def read_record(session_dir: Path, name: str) -> KernelRecord | None:
    try:
        raw = (kernels_dir(session_dir) / f"{name}.json").read_bytes()
        return KernelRecord.model_validate(json.loads(raw))
    except (OSError, ValueError, ValidationError):
        return None


def write_record(session_dir: Path, name: str, record: KernelRecord) -> None:
    root = kernels_dir(session_dir)
    with contextlib.suppress(FileExistsError):
        os.mkdir(root, 0o711)
    part = root / f".{name}.json.part"
    part.write_text(record.model_dump_json(), encoding="utf-8")
    os.replace(part, root / f"{name}.json")


def remove(session_dir: Path, name: str) -> bool:
    """Forget a kernel (its record and state); True when there was something."""
    root = kernels_dir(session_dir)
    found = False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(root / f"{name}.json")
        found = True
    if (root / name).is_dir() and not (root / name).is_symlink():
        shutil.rmtree(root / name, ignore_errors=True)  # never follows the sandbox's links
        found = True
    return found


def drop_state(session_dir: Path, name: str) -> None:
    """The saved names are gone (a kernel that died starts empty)."""
    with contextlib.suppress(OSError):
        os.unlink(kernels_dir(session_dir) / name / STATE_FILE)


def saved(session_dir: Path) -> list[KernelInfo]:
    """The session's kernels at rest: a record and saved state on its disk."""
    root = kernels_dir(session_dir)
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return []
    found = []
    for entry in entries:
        name = entry[:-5] if entry.endswith(".json") else ""
        if not KERNEL_NAME.fullmatch(name) or not has_saved_state(session_dir, name):
            continue
        record = read_record(session_dir, name)
        if record is not None and (record.state == "saved" or (  # or saved as its server died
                record.state == "running" and saved_since_start(session_dir, name))):
            found.append(KernelInfo(name=name, state="saved", started_at=record.started_at,
                                    last_used_at=record.last_used_at))
    return found


def now() -> float:
    return round(time.time(), 3)
