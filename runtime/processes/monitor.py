"""`process_wait`: wait for a line of a process's output to match, for its exit, or for a
timeout; the agent's monitor.

Patterns are compiled by RE2 (google-re2), which matches in time linear in the line: no
pattern a caller sends can make the supervisor backtrack without bound. Patterns are at
most ``MAX_PATTERN`` characters; a line longer than ``MAX_LINE`` bytes is matched on its
first ``MAX_LINE`` bytes. Lines are read from the log, from ``since`` (default: the oldest
kept), so a line written before the wait began counts: "wait for the server to say ready"
does not miss a server that was quick.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import re2

from runtime.errors import InvalidInput
from runtime.policy.decision import Subject
from runtime.processes.models import ProcessRecord, WaitResult

if TYPE_CHECKING:
    from runtime.processes.ends import Ends

MAX_PATTERN = 1000
MAX_LINE = 64 * 1024
DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 600.0
RECENT = 4096
CHUNK = 256 * 1024


def compile_pattern(pattern: str) -> Any:
    if len(pattern) > MAX_PATTERN:
        raise InvalidInput(f"pattern is longer than {MAX_PATTERN} characters")
    options = re2.Options()
    options.max_mem = 8 << 20
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        raise InvalidInput(f"pattern is not a regular expression RE2 accepts: {exc}") from None


RecordOf = Callable[[Subject, str], Awaitable[ProcessRecord]]


async def wait_for(ends: Ends, record_of: RecordOf, subject: Subject, record: ProcessRecord,
                   pattern: str | None, timeout_s: float | None, since: int) -> WaitResult:
    """``record_of(subject, id)``: the process's record as it is now."""
    parts = _Parts(ends, record_of)
    regex = compile_pattern(pattern) if pattern else None
    timeout = DEFAULT_TIMEOUT_S if timeout_s is None else max(0.0, min(timeout_s,
                                                                       MAX_TIMEOUT_S))
    deadline = time.monotonic() + timeout
    outlog = ends.log_of(record)
    reached, partial = max(0, since), b""
    while True:
        live = ends.table.live.get(record.id)
        ended = live is None
        data, after, first = await asyncio.to_thread(outlog.read, reached, CHUNK,
                                                     complete=True)
        if first > reached:  # the log moved on: what was dropped cannot match any more
            partial = b""
        reached = after
        if regex is not None and data:
            lines = (partial + data).split(b"\n")
            partial = lines.pop()[-MAX_LINE:]
            if ended and len(data) < CHUNK:  # the last line, without its newline
                lines.append(partial)
            for raw in lines:
                line = raw[:MAX_LINE].decode("utf-8", "replace").rstrip("\r")
                if regex.search(line):
                    return await _result(parts, subject, record, outlog, matched=True,
                                         line=line, next_at=reached)
        if data and len(data) == CHUNK:
            continue  # more is there already
        if ended:
            return await _result(parts, subject, record, outlog, exited=True,
                                 next_at=reached)
        left = deadline - time.monotonic()
        if left <= 0:
            return await _result(parts, subject, record, outlog, timed_out=True,
                                 next_at=reached)
        assert live is not None
        await live.changed(min(left, 1.0))


@dataclass(frozen=True)
class _Parts:
    ends: Ends
    record_of: RecordOf


async def _result(parts: _Parts, subject: Subject, record: ProcessRecord,
                  outlog: Any, *, matched: bool = False, line: str | None = None,
                  exited: bool = False, timed_out: bool = False, next_at: int = 0
                  ) -> WaitResult:
    end = outlog.end
    data, _, _ = await asyncio.to_thread(outlog.read, max(0, end - RECENT), RECENT,
                                         complete=True)
    if record.id not in parts.ends.table.live:
        outlog.close()
    now = await parts.record_of(subject, record.id)
    return WaitResult(matched=matched, line=line, exited=exited or now.state != "running",
                      timed_out=timed_out, process=now.public(),
                      recent=data.decode("utf-8", "replace"))
