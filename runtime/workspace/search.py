"""Read-only searches of a session's files (grep, glob, tree), bounded and link-safe.

The agent's `grep`, `glob` and `tree` tools run here, on the host, without a container, so
everything a sandbox could plant is answered the way the rest of the workspace layer answers
it: directories are opened fd-relatively with ``O_NOFOLLOW`` beneath the root (a symlink is
never followed, a mount point never crossed), only regular single-link files are read, and
the caller (``Workspace``) acts as the sandbox uid, so a file or directory the sandbox made
unreadable is skipped, not read with root's rights.

A search is bounded three ways: directory entries looked at (``max_entries``), bytes read
(per file and in all) and wall time (``max_time_s``); reaching a bound ends the search with
what was found and says so. Regular expressions and globs are compiled by RE2 (google-re2),
whose matching time is linear in the text (``runtime.workspace.patterns``).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from runtime.workspace.fs import DIR_FLAGS, READ_FLAGS, Resolver
from runtime.workspace.paths import MAX_DEPTH, is_listable_name
from runtime.workspace.patterns import Glob, LinePattern

MiB = 1024 * 1024
LINE_SHOWN = 300  # characters of a matching line in the answer
BINARY_PROBE = 8192  # a NUL byte in a file's first bytes: binary, not searched
SKIPPED_DIRS = frozenset({".git"})  # version-control internals: noise for a text search


class SearchLimits(BaseModel):
    """The bounds of one search (defaults suit an interactive tool call)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_entries: int = Field(20_000, ge=1, description="directory entries looked at")
    max_file_bytes: int = Field(4 * MiB, ge=1, description="larger files are skipped")
    max_total_bytes: int = Field(64 * MiB, ge=1, description="bytes read in all")
    max_time_s: float = Field(5.0, gt=0, description="wall time of the whole search")


class GrepMatch(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    line: int = Field(ge=1)
    text: str


class SearchEnd(BaseModel):
    """How a search ended: whether a bound cut it short and what it could not look at."""

    truncated: bool = False  # more results than asked for
    timed_out: bool = False  # the time bound ended it
    exhausted: bool = False  # the entry or byte bound ended it
    unreadable: int = 0  # files or directories the sandbox uid may not read
    skipped: int = 0  # files not searched: binary, too large, links, special files


class GrepResult(SearchEnd):
    matches: list[GrepMatch] = []
    files_searched: int = 0


class GlobResult(SearchEnd):
    paths: list[str] = []


class TreeEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    kind: Literal["file", "dir"]
    size: int = Field(ge=0)
    depth: int = Field(ge=0)


class TreeResult(SearchEnd):
    entries: list[TreeEntry] = []


# -- the walk ----------------------------------------------------------------------------------


@dataclass
class Budget:
    """What is left of a search's bounds, and how it ended (``SearchEnd``'s fields)."""

    limits: SearchLimits
    deadline: float = 0.0
    entries: int = 0
    bytes_read: int = 0
    end: SearchEnd = field(default_factory=SearchEnd)

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.limits.max_time_s

    def out(self) -> bool:
        """Whether a bound is reached (recorded in ``end``)."""
        if time.monotonic() > self.deadline:
            self.end.timed_out = True
        elif (self.entries > self.limits.max_entries
              or self.bytes_read >= self.limits.max_total_bytes):
            self.end.exhausted = True
        return self.end.timed_out or self.end.exhausted

    def finish(self, result: SearchEnd) -> None:
        for name in ("truncated", "timed_out", "exhausted", "unreadable", "skipped"):
            setattr(result, name, getattr(result, name) or getattr(self.end, name))


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the search root, '/'-separated
    name: str
    st: os.stat_result
    depth: int  # 1 for the root's own entries
    parent_fd: int  # valid only while the walk is at this entry


def walk(resolver: Resolver, root_fd: int, budget: Budget, *,
         max_depth: int = MAX_DEPTH) -> Iterator[Entry]:
    """Every addressable entry under ``root_fd``, depth-first and sorted, directories before
    their contents; never follows a link, skips what the acting uid cannot open."""

    def visit(fd: int, rel: str, depth: int) -> Iterator[Entry]:
        try:
            with os.scandir(fd) as it:
                names = sorted(e.name for e in it)
        except PermissionError:
            budget.end.unreadable += 1
            return
        for name in names:
            budget.entries += 1
            if budget.out():
                return
            if not is_listable_name(name):
                budget.end.skipped += 1
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            path = f"{rel}/{name}" if rel else name
            yield Entry(path, name, st, depth, fd)
            if budget.out():
                return
            if not stat.S_ISDIR(st.st_mode) or depth >= max_depth or name in SKIPPED_DIRS:
                continue
            try:
                child = resolver.open_child(fd, name, DIR_FLAGS)
            except PermissionError:
                budget.end.unreadable += 1
                continue
            except OSError:
                continue  # swapped for a link or removed: never followed
            try:
                yield from visit(child, path, depth + 1)
            finally:
                os.close(child)

    yield from visit(root_fd, "", 1)


def read_text(resolver: Resolver, entry: Entry, budget: Budget) -> str | None:
    """The text of a regular single-link file, or ``None`` (counted) when it is not one, is
    unreadable, too large or binary."""
    st = entry.st
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        budget.end.skipped += 1
        return None
    if st.st_size > budget.limits.max_file_bytes:
        budget.end.skipped += 1
        return None
    try:
        fd = resolver.open_child(entry.parent_fd, entry.name, READ_FLAGS)
    except PermissionError:
        budget.end.unreadable += 1
        return None
    except OSError:
        budget.end.skipped += 1  # replaced by a link or a FIFO meanwhile: not opened
        return None
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or opened.st_nlink > 1:
            budget.end.skipped += 1
            return None
        os.set_blocking(fd, True)
        cap = min(budget.limits.max_file_bytes,
                  budget.limits.max_total_bytes - budget.bytes_read)
        data = os.read(fd, cap + 1) if cap > 0 else b""
    except PermissionError:
        budget.end.unreadable += 1
        return None
    finally:
        os.close(fd)
    budget.bytes_read += len(data)
    if len(data) > cap or b"\x00" in data[:BINARY_PROBE]:
        budget.end.skipped += 1
        return None
    return data.decode("utf-8", "replace")


# -- the three searches --------------------------------------------------------------------------


def grep_text(text: str, path: str, pattern: LinePattern, found: list[GrepMatch], want: int,
              budget: Budget) -> bool:
    """Add ``text``'s matching lines to ``found``; False once more than ``want`` match or a
    bound is reached. Lines end at "\\n" (a "\\r" before it is dropped)."""
    text = text.replace("\r\n", "\n")
    if pattern.any_line is not None and pattern.any_line.search(text) is None:
        return True  # a line that matches would match here too: no line does
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the text's last newline ends a line, it starts none
    for number, line in enumerate(lines, 1):
        if number % 4096 == 0 and budget.out():
            return False
        if pattern.line.search(line) is None:
            continue
        if len(found) >= want:
            budget.end.truncated = True
            return False
        shown = line if len(line) <= LINE_SHOWN else line[:LINE_SHOWN] + "…"
        found.append(GrepMatch(path=path, line=number, text=shown))
    return True


def grep(resolver: Resolver, root_fd: int, prefix: str, pattern: LinePattern, *, glob: Glob | None,
         max_results: int, limits: SearchLimits, single: str | None = None) -> GrepResult:
    """Lines matching ``pattern`` in the files under ``root_fd`` (or in the one file ``single``
    of that directory); paths are shown under ``prefix``."""
    budget = Budget(limits)
    result = GrepResult()

    def entries() -> Iterator[Entry]:
        if single is None:
            yield from walk(resolver, root_fd, budget)
            return
        yield Entry(single, single, os.stat(single, dir_fd=root_fd, follow_symlinks=False),
                    1, root_fd)

    for entry in entries():
        if stat.S_ISDIR(entry.st.st_mode) or (glob is not None and not glob.matches(entry.path)):
            continue
        text = read_text(resolver, entry, budget)
        if text is None:
            continue
        result.files_searched += 1
        shown = join(prefix, entry.path) if single is None else prefix
        if not grep_text(text, shown, pattern, result.matches, max_results, budget):
            break
        if budget.out():
            break
    budget.finish(result)
    return result


def glob_paths(resolver: Resolver, root_fd: int, prefix: str, glob: Glob, *,
               max_results: int, limits: SearchLimits) -> GlobResult:
    """Regular files under ``root_fd`` whose path (or name) the glob matches, sorted."""
    budget = Budget(limits)
    result = GlobResult()
    for entry in walk(resolver, root_fd, budget):
        if not stat.S_ISREG(entry.st.st_mode) or not glob.matches(entry.path):
            continue
        if len(result.paths) >= max_results:
            result.truncated = True
            break
        result.paths.append(join(prefix, entry.path))
    budget.finish(result)
    return result


def tree(resolver: Resolver, root_fd: int, prefix: str, *, depth: int, max_entries: int,
         limits: SearchLimits) -> TreeResult:
    """Directories and regular files under ``root_fd`` down to ``depth`` levels."""
    budget = Budget(limits)
    result = TreeResult()
    for entry in walk(resolver, root_fd, budget, max_depth=depth):
        mode = entry.st.st_mode
        if stat.S_ISDIR(mode):
            kind: Literal["file", "dir"] = "dir"
        elif stat.S_ISREG(mode) and entry.st.st_nlink <= 1:
            kind = "file"
        else:
            result.skipped += 1  # links and special files are not shown
            continue
        if len(result.entries) >= max_entries:
            result.truncated = True
            break
        result.entries.append(TreeEntry(path=join(prefix, entry.path), kind=kind,
                                        size=entry.st.st_size if kind == "file" else 0,
                                        depth=entry.depth))
    budget.finish(result)
    return result


def join(prefix: str, rel: str) -> str:
    return f"{prefix}/{rel}" if prefix and rel else prefix or rel
