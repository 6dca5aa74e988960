"""Where a session's snapshots are kept, what they take on disk, and removing them.

Below the disk (``runtime.workspace.disk`` counts the tenant's snapshots in its quota and
removes a deleted session's) and below the snapshot store (``runtime.workspace.snapshots``,
which takes, restores and forks them). Beside the session's image (``root/<tenant>/``)::

    <session>.img                     the session's disk
    <session>.snapshots/<sid>.img     a snapshot's image (sparse)
    <session>.snapshots/<sid>.json    its metadata {id, name, created_at, bytes}
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from runtime.workspace.image_copy import PART, SNAPSHOTS_SUFFIX, image_of, snapshots_dir


def snapshot_bytes(tenant_dir: Path) -> int:
    """What the tenant's snapshots take on disk (their allocated bytes, leftovers too)."""
    total = 0
    try:
        dirs = [e for e in os.scandir(tenant_dir) if e.name.endswith(SNAPSHOTS_SUFFIX)]
    except FileNotFoundError:
        return 0
    for found in dirs:
        try:
            entries = list(os.scandir(found.path))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                total += entry.stat(follow_symlinks=False).st_blocks * 512
    return total


def remove_all(session_dir: Path) -> None:
    """Delete a session's snapshots (its session is being deleted), and the part of an image
    a crash left mid-restore or mid-fork beside it (counted nowhere, else kept forever)."""
    shutil.rmtree(snapshots_dir(session_dir), ignore_errors=True)
    image = image_of(session_dir)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(image.with_name(image.name + PART))
