"""The write-ahead, hash-chained audit log: ``<data_dir>/audit.sqlite3`` plus ``audit.jsonl``.

One writer at a time: an ``asyncio.Lock`` and one writer thread (``runtime.audit.writer``)
inside the process, and across processes the mirror's ``flock`` around ``BEGIN IMMEDIATE …
COMMIT`` (WAL) and the mirror write. So ``seq`` is gap-free. ``append`` returns once the
record is committed; a durable append (the default: intents, denials, approvals, actions)
once it is fsync'd too. A lazy one (``durable=False``: outcomes) is fsync'd with the next
durable append or at most ``sync_delay_s`` later (group commit), and the mirror likewise:
a power loss in that window turns a finished execution's outcome into ``interrupted``
(below), never loses an intent. Any failure to write is ``AuditUnavailable``: callers must
not run anything (fail closed).

This module is the lifecycle and the locking around those parts: the instance lock held
while open (``runtime.audit.instances``), crash recovery at open (``runtime.audit.recovery``:
intents of ended instances get ``interrupted``), signed checkpoints every
``checkpoint_every`` records, every ``checkpoint_interval_s`` and at close
(``runtime.audit.checkpoints``), the schema and reads (``runtime.audit.database``).
"""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import aiosqlite

from runtime.audit.checkpoints import CheckpointSchedule, write_checkpoint_file
from runtime.audit.database import last_checkpoint_seq, open_reader, select_records
from runtime.audit.instances import INSTANCE_ID, lock_instance, release_instance
from runtime.audit.layout import DB_NAME, MIRROR_NAME
from runtime.audit.mirror import Mirror
from runtime.audit.records import GENESIS_HASH, AuditEntry, AuditRecord
from runtime.audit.recovery import interrupted_entries
from runtime.audit.signing import Checkpoint, Signer
from runtime.audit.writer import ChainWriter
from runtime.errors import AuditUnavailable, ConfigError
from runtime.logging import get_logger

log = get_logger(__name__)

SYNC_DELAY_S = 0.05  # longest a committed record waits for its fsync
__all__ = ["AuditLog"]
T = TypeVar("T")


class AuditLog:
    """Append-only audit chain of one data dir. Use ``async with AuditLog(...)``."""

    def __init__(
        self, data_dir: Path, *, instance: str | None = None, checkpoint_every: int = 1000,
        checkpoint_interval_s: float = 60.0,
        on_append: Callable[[float], None] | None = None, sync_delay_s: float = SYNC_DELAY_S,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.on_append = on_append  # observer: seconds one durable append took
        self.instance = instance or "p-" + secrets.token_hex(6)
        if not INSTANCE_ID.fullmatch(self.instance):
            raise ConfigError(f"bad audit instance id {self.instance!r}")
        self._checkpoints = CheckpointSchedule(checkpoint_every, checkpoint_interval_s)
        self.sync_delay_s = sync_delay_s
        self._sync_timer: asyncio.TimerHandle | None = None
        self._sync_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._db: aiosqlite.Connection | None = None  # reads
        self._writer: ChainWriter | None = None  # writes, on its own thread
        self._write_thread: ThreadPoolExecutor | None = None
        self._mirror = Mirror(self.data_dir / MIRROR_NAME)
        self._signer: Signer | None = None
        self._instance_fd: int | None = None
        self._head: tuple[int, str] = (0, GENESIS_HASH)

    @property
    def db_path(self) -> Path:
        return self.data_dir / DB_NAME

    @property
    def is_open(self) -> bool:
        return self._db is not None

    @property
    def head(self) -> tuple[int, str]:
        """(seq, hash) of the last record this process wrote or saw."""
        return self._head

    async def __aenter__(self) -> AuditLog:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        """Create or open the store, reconcile the mirror, close interrupted intents."""
        if self._db is not None:
            return
        try:
            self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._signer = await asyncio.to_thread(Signer.load_or_create, self.data_dir / "keys")
            await asyncio.to_thread(self._lock_instance)
            await asyncio.to_thread(self._mirror.open)
            self._db = await open_reader(self.db_path)
            self._checkpoints.last_seq = await last_checkpoint_seq(self._db)
            self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="navi-audit-writer")
            self._writer = await self._on_writer(
                ChainWriter, self.db_path, self._mirror, self.instance)
            await self._recover()
        except (OSError, sqlite3.Error) as exc:
            await self._teardown()
            raise AuditUnavailable(f"audit store unavailable: {exc}") from None
        except BaseException:
            await self._teardown()
            raise
        log.info("audit_open", path=str(self.db_path), head=self._head[0], instance=self.instance)

    async def close(self) -> None:
        """Write a final signed checkpoint, then release everything."""
        if self._db is None:
            return
        if self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None
        try:
            async with self._lock:
                await self._checkpoint_locked()
                await self._sync_locked()
        except AuditUnavailable as exc:
            log.warning("audit_close_checkpoint_failed", error=exc.message)
        finally:
            if self._sync_task is not None:
                await asyncio.gather(self._sync_task, return_exceptions=True)
            await self._teardown()

    async def _teardown(self) -> None:
        if self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                await self._on_writer(writer.close)
            except sqlite3.Error:
                pass
        if self._write_thread is not None:
            self._write_thread.shutdown(wait=True)
            self._write_thread = None
        if self._db is not None:
            db, self._db = self._db, None
            try:
                await db.close()
            except sqlite3.Error:
                pass
        self._mirror.close()
        if self._instance_fd is not None:
            fd, self._instance_fd = self._instance_fd, None
            release_instance(self.data_dir, self.instance, fd)

    def _lock_instance(self) -> None:
        self._instance_fd = lock_instance(self.data_dir, self.instance)
        if self._instance_fd is None:
            raise ConfigError(f"audit instance {self.instance!r} is open in another process")

    async def _recover(self) -> None:
        """Mirror back-fill (via an empty append round) and interrupted intents."""
        async with self._lock:
            await self._write_locked([])
            closes = await interrupted_entries(self._require_db(), self.data_dir, self.instance)
            if closes:
                await self._write_locked(closes)
                log.warning("audit_interrupted_closed", count=len(closes))

    # -- writing ------------------------------------------------------------------------------

    async def append(self, entry: AuditEntry, *, durable: bool = True,
                     then: Callable[[], None] | None = None) -> AuditRecord:
        """Append one record and return it: committed, and fsync'd unless ``durable=False``
        (then within ``sync_delay_s``, or sooner with the next durable append).

        ``then``: called on the writer thread as soon as the record is written so (before
        this returns; never if the append fails); short, non-blocking, must not raise
        (``StartGate.open``: a warm job starts without waiting for the event loop)."""
        started = time.perf_counter()
        async with self._lock:
            records = await self._write_locked([entry], durable=durable, then=then)
            if self.on_append is not None:
                self.on_append(time.perf_counter() - started)
            if self._checkpoints.due(records[0].seq):
                try:
                    await self._checkpoint_locked()
                except AuditUnavailable as exc:  # the record itself is written
                    log.warning("audit_checkpoint_failed", error=exc.message)
            return records[0]

    def _require_db(self) -> aiosqlite.Connection:
        if self._db is None:
            raise AuditUnavailable("audit log is not open")
        return self._db

    def _require_writer(self) -> ChainWriter:
        if self._writer is None:
            raise AuditUnavailable("audit log is not open")
        return self._writer

    async def _on_writer(self, fn: Callable[..., T], *args: Any) -> T:
        assert self._write_thread is not None
        return await asyncio.get_running_loop().run_in_executor(self._write_thread, fn, *args)

    async def _write_locked(self, entries: list[AuditEntry], *, durable: bool = True,
                            then: Callable[[], None] | None = None) -> list[AuditRecord]:
        writer = self._require_writer()

        def append() -> list[AuditRecord]:
            records = writer.append(entries, durable=durable)
            if then is not None:
                then()
            return records

        try:
            records = await self._on_writer(append)
        except OSError as exc:
            raise AuditUnavailable(f"audit store write failed: {exc.strerror or exc}") from None
        except sqlite3.Error as exc:
            raise AuditUnavailable(f"audit store write failed: {exc}") from None
        self._head = writer.head
        self._schedule_sync()
        return records

    def _schedule_sync(self) -> None:
        """Group commit: one fsync, ``sync_delay_s`` from now, for whatever is not yet durable."""
        if self._sync_timer is None and self._writer is not None and self._writer.unsynced:
            self._sync_timer = asyncio.get_running_loop().call_later(
                self.sync_delay_s, self._start_sync)

    def _start_sync(self) -> None:
        self._sync_timer = None
        if self._sync_task is None or self._sync_task.done():
            self._sync_task = asyncio.ensure_future(self._sync())

    async def _sync(self) -> None:
        try:
            async with self._lock:
                await self._sync_locked()
        except AuditUnavailable as exc:  # the next durable append fails closed if it persists
            log.warning("audit_sync_failed", error=exc.message)

    async def _sync_locked(self) -> None:
        if self._writer is None or not self._writer.unsynced:
            return
        try:
            await self._on_writer(self._writer.sync)
        except OSError as exc:
            raise AuditUnavailable(f"audit store sync failed: {exc.strerror or exc}") from None

    # -- checkpoints --------------------------------------------------------------------------

    async def checkpoint(self) -> Checkpoint:
        async with self._lock:
            return await self._checkpoint_locked()

    async def _checkpoint_locked(self) -> Checkpoint:
        writer = self._require_writer()
        assert self._signer is not None
        signer = self._signer

        def checkpoint() -> Checkpoint:
            cp = writer.checkpoint(signer.sign)
            write_checkpoint_file(self.data_dir, cp)
            return cp

        try:
            cp = await self._on_writer(checkpoint)
        except (OSError, sqlite3.Error) as exc:
            raise AuditUnavailable(f"audit checkpoint failed: {exc}") from None
        self._checkpoints.done(cp.seq)
        return cp

    # -- reading ------------------------------------------------------------------------------

    async def records(
        self, *, tenant: str | None = None, session: str | None = None, tool: str | None = None,
        exec_id: str | None = None, kind: str | None = None, since_seq: int | None = None,
        since_ts: str | None = None, limit: int = 1000, action: str | None = None,
    ) -> list[AuditRecord]:
        """Records in seq order, filtered; `since_seq` is exclusive, `since_ts` inclusive;
        `action` matches records without one (older) as `exec`."""
        return await select_records(
            self._require_db(), limit=limit, tenant=tenant, session=session, tool=tool,
            exec_id=exec_id, kind=kind, since_seq=since_seq, since_ts=since_ts, action=action)
