"""Session-disk calls that must never run on the event loop: a small thread pool of their own.

Why: a session's filesystem is frozen for a moment now and then (a snapshot's or a backup's
consistent copy, ``runtime.workspace.image_copy``), and any call that changes it (an unlink,
a rename, a close that flushes) waits until it thaws. On the event loop that wait stops every
request of every tenant; on the default thread pool a burst of them starves every other
``asyncio.to_thread``. Discarding an upload goes here: explicitly (``run``) from a request
that failed, or from the garbage collector (``later``: a writer dropped unfinished, on
whatever thread dropped it), with at most ``MAX_WORKERS`` threads waiting on frozen disks.

The pool is made on first use (a garbage-collected writer has no app to ask for one) and
lives as long as the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterable, Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, Protocol, TypeVar

from runtime.logging import get_logger

log = get_logger(__name__)

T = TypeVar("T")
E = TypeVar("E", covariant=True)
MAX_WORKERS = 4

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(MAX_WORKERS, thread_name_prefix="navi-disk")
        return _pool


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on the disk pool; a cancelled caller does not cancel it (a
    discard half done is finished, not abandoned)."""
    future = asyncio.get_running_loop().run_in_executor(pool(), partial(fn, *args, **kwargs))
    return await asyncio.shield(future)


def later(fn: Callable[[], object]) -> None:
    """Run ``fn`` on the disk pool and do not wait (from any thread, a finalizer too);
    its failure is logged. Inline only when the pool has shut down (interpreter exit)."""
    try:
        future: Future[object] = pool().submit(fn)
    except RuntimeError:  # cannot schedule new futures after shutdown
        fn()
        return
    future.add_done_callback(_log_failure)


def _log_failure(future: Future[object]) -> None:
    exc = future.exception()
    if exc is not None:
        log.warning("disk_discard_failed", error=f"{type(exc).__name__}: {exc}")


class Writer(Protocol[E]):
    """An atomic file writer (a session's `Workspace.writer`, or a node's over the hop)."""

    def write(self, data: bytes, /) -> None: ...

    def commit(self) -> E: ...

    def abort(self) -> None: ...


async def fill(writer: Writer[T], chunks: AsyncIterable[bytes], *,
               first: Callable[[], Awaitable[object]] | None = None) -> T:
    """``first()`` (e.g. the audit record), then every chunk into ``writer``, then commit,
    each step off the event loop; on any failure the file is discarded (on the disk pool:
    the disk may be frozen) and the failure raised. Uploads of the API and of the E2B
    bridge alike."""
    try:
        if first is not None:
            await first()
        async for chunk in chunks:
            if chunk:
                await asyncio.to_thread(writer.write, chunk)
        return await asyncio.to_thread(writer.commit)
    except BaseException:
        with contextlib.suppress(Exception):
            await run(writer.abort)
        raise
