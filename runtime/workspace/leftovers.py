"""Temporary files a killed supervisor left in a session's workspace.

Uploads and file writes go to a `.navi-tmp-<random>` file next to their target and are
renamed over it when complete (runtime.workspace.streams.AtomicWriter). A supervisor killed
mid-upload never renames nor deletes it: the half-written bytes would stay on the session's
disk (counting against its quota, visible to the sandbox). Names with that prefix are
reserved (the API refuses them), so when a session's disk is mounted again after a restart
every such file is removed. The walk never follows a symlink and unlinks through the
directory's fd, so a sandbox that swaps directories for links cannot point it elsewhere.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from runtime.logging import get_logger
from runtime.workspace.paths import RESERVED_PREFIX

log = get_logger(__name__)

MAX_ENTRIES = 1_000_000  # a bound on the walk of a workspace the sandbox filled with names


def sweep_temp_files(root: Path) -> int:
    """Unlink every `.navi-tmp-*` non-directory below `root`; returns how many."""
    removed = seen = 0
    for _dirpath, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        seen += len(dirnames) + len(filenames)
        for name in filenames:
            if name.startswith(RESERVED_PREFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dirfd)
                    removed += 1
        if seen > MAX_ENTRIES:
            break
    if removed:
        log.warning("workspace_temp_files_removed", count=removed, root=str(root))
    return removed
