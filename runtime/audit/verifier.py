"""The server's chain check (`GET /v1/audit/verify`), kept from becoming a denial of service.

`verify_store` re-hashes the whole log: linear in its size, and any auditor may ask. So it
runs on a worker thread of its own (never the shared default pool that file operations and
store reads use), at most one at a time; requests that arrive while one runs share its
report; and a report is kept while the log is unchanged (the writer's head, and the size,
mtime and inode of the database, its WAL, the mirror and the checkpoint file), so asking
again without a new record costs a few `stat` calls.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from runtime.audit.layout import CHECKPOINT_NAME, DB_NAME, MIRROR_NAME
from runtime.audit.verify import VerifyReport, verify_store

Stamp = tuple[object, ...]
_FILES = (DB_NAME, DB_NAME + "-wal", MIRROR_NAME, CHECKPOINT_NAME)


class ChainVerifier:
    def __init__(self, data_dir: Path, head: Callable[[], object] = lambda: None) -> None:
        self.data_dir = Path(data_dir)
        self.head = head
        self.runs = 0  # full verifications done (the rest were answered from `_kept`)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="audit-verify")
        self._kept: tuple[Stamp, VerifyReport] | None = None
        self._task: asyncio.Future[VerifyReport] | None = None

    async def report(self) -> VerifyReport:
        """The chain's report as of now (or of a check that was running when asked)."""
        if self._task is None:
            loop = asyncio.get_running_loop()
            task = self._task = loop.run_in_executor(self._pool, self._fresh)
            task.add_done_callback(self._done)
        return await asyncio.shield(self._task)

    def _done(self, task: asyncio.Future[VerifyReport]) -> None:
        if self._task is task:
            self._task = None
        if not task.cancelled():
            task.exception()  # retrieved: each waiter got it already

    def _stamp(self) -> Stamp:
        parts: list[object] = [self.head()]
        for name in _FILES:
            try:
                st = os.stat(self.data_dir / name)
            except FileNotFoundError:
                parts.append(None)
            else:
                parts.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(parts)

    def _fresh(self) -> VerifyReport:
        """On the worker: the kept report while nothing changed, else a full check."""
        stamp = self._stamp()  # before reading: a change while it runs means check again
        kept = self._kept
        if kept is not None and kept[0] == stamp:
            return kept[1]
        report = verify_store(self.data_dir)
        self.runs += 1
        self._kept = (stamp, report)
        return report

    def close(self) -> None:
        """At shutdown: no new check starts (one running ends on its own)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
