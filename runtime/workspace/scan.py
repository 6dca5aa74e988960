"""Bounded recursive walk of a workspace: for listings and disk accounting.

The sandbox controls the tree, so the walk never follows a symlink, never opens anything but
directories (each ``O_NOFOLLOW | O_DIRECTORY``, fd-relative), holds at most one fd per level,
stops at ``MAX_DEPTH`` levels and after a fixed number of entries, and skips names clients
could not address anyway (see ``paths.is_listable_name``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from runtime.workspace.fs import DIR_FLAGS, Resolver
from runtime.workspace.paths import MAX_DEPTH, is_listable_name


@dataclass(frozen=True)
class Found:
    path: str
    st: os.stat_result
    listable: bool  # a regular, singly-linked file whose whole path a client may address


class ScanLimitExceeded(Exception):
    pass


def walk(resolver: Resolver, dir_fd: int, prefix: str, max_entries: int) -> Iterator[Found]:
    """Yield every entry under ``dir_fd`` (depth-first, sorted). ``ScanLimitExceeded`` past
    ``max_entries``. Symlinks, special files and hard links are yielded with ``listable=False``
    (their size still counts) and never descended into."""
    seen = 0

    def visit(fd: int, rel: str, depth: int, addressable: bool) -> Iterator[Found]:
        nonlocal seen
        entries = []
        with os.scandir(fd) as it:
            for e in it:
                seen += 1
                if seen > max_entries:
                    raise ScanLimitExceeded
                entries.append((e.name, e))
        entries.sort(key=lambda pair: pair[0])
        for name, entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # vanished meanwhile
            path = f"{rel}/{name}" if rel else name
            ok = addressable and is_listable_name(name)
            if stat.S_ISDIR(st.st_mode):
                if depth + 1 >= MAX_DEPTH:
                    continue
                try:
                    child = resolver.open_child(fd, name, DIR_FLAGS)
                except OSError:
                    continue  # swapped for a symlink or removed: not followed
                try:
                    yield from visit(child, path, depth + 1, ok)
                finally:
                    os.close(child)
            else:
                listable = ok and stat.S_ISREG(st.st_mode) and st.st_nlink <= 1
                yield Found(path, st, listable)

    yield from visit(dir_fd, prefix, prefix.count("/") + (1 if prefix else 0), True)
