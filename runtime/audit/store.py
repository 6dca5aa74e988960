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

Crash recovery: every process holds an exclusive lock on
``audit.instances/<instance>.lock`` while the log is open. At open, an ``intent`` with no
``outcome``/``interrupted`` record whose instance lock is free (its process is gone) is
closed with an ``interrupted`` record, so the chain tells what was cut short. A live
instance's in-flight executions are never touched.

Signed checkpoints (``runtime.audit.signing``) pin the head every ``checkpoint_every``
records, every ``checkpoint_interval_s`` and at close; the latest one is also written to
``audit.checkpoint.json`` (atomically), outside the database.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import re
import secrets
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import aiosqlite

from runtime.audit.mirror import Mirror, fsync_dir
from runtime.audit.records import GENESIS_HASH, AuditEntry, AuditRecord, canonical_json
from runtime.audit.signing import Checkpoint, Signer
from runtime.audit.writer import COLUMNS, ChainWriter
from runtime.errors import AuditUnavailable, ConfigError
from runtime.logging import get_logger

log = get_logger(__name__)

DB_NAME = "audit.sqlite3"
MIRROR_NAME = "audit.jsonl"
CHECKPOINT_NAME = "audit.checkpoint.json"
INSTANCES_DIR = "audit.instances"
SCHEMA_VERSION = 1
SYNC_DELAY_S = 0.05  # longest a committed record waits for its fsync
_INSTANCE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")

SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY, ts TEXT NOT NULL, kind TEXT NOT NULL, tenant TEXT,
    session TEXT, exec_id TEXT, tool TEXT, instance TEXT,
    prev_hash TEXT NOT NULL, hash TEXT NOT NULL, body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_tenant ON audit (tenant, seq);
CREATE INDEX IF NOT EXISTS audit_exec ON audit (exec_id);
CREATE INDEX IF NOT EXISTS audit_session ON audit (session, seq);
CREATE INDEX IF NOT EXISTS audit_kind ON audit (kind, seq);
CREATE TABLE IF NOT EXISTS checkpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT, seq INTEGER NOT NULL, hash TEXT NOT NULL,
    ts TEXT NOT NULL, key_id TEXT NOT NULL, signature TEXT NOT NULL
);
"""
__all__ = ["AuditLog", "CHECKPOINT_NAME", "COLUMNS", "DB_NAME", "MIRROR_NAME"]
T = TypeVar("T")
_OPEN_INTENTS = """
SELECT body FROM audit AS a WHERE a.kind = 'intent' AND NOT EXISTS (
    SELECT 1 FROM audit AS b WHERE b.exec_id = a.exec_id AND b.kind IN ('outcome', 'interrupted')
) ORDER BY a.seq
"""


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
        if not _INSTANCE.fullmatch(self.instance):
            raise ConfigError(f"bad audit instance id {self.instance!r}")
        self.checkpoint_every = checkpoint_every
        self.checkpoint_interval_s = checkpoint_interval_s
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
        self._last_cp_seq = 0
        self._last_cp_time = time.monotonic()
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
            if not self.db_path.exists():  # private from the start; -wal/-shm inherit the mode
                os.close(os.open(self.db_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
            db = await aiosqlite.connect(self.db_path, isolation_level=None, timeout=30)
            self._db = db
            await db.execute("PRAGMA journal_mode=WAL")
            await db.execute("PRAGMA synchronous=FULL")
            await db.execute("PRAGMA busy_timeout=30000")
            await db.executescript(SCHEMA)
            await db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")  # a real write: RO fails
            async with db.execute(
                "SELECT seq FROM checkpoints ORDER BY id DESC LIMIT 1"
            ) as cur:
                row = await cur.fetchone()
            self._last_cp_seq = row[0] if row else 0
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
            try:  # a clean close leaves nothing in flight: the lock file can go
                (self.data_dir / INSTANCES_DIR / f"{self.instance}.lock").unlink()
            except OSError:
                pass
            os.close(self._instance_fd)  # releases the instance lock
            self._instance_fd = None

    def _lock_instance(self) -> None:
        folder = self.data_dir / INSTANCES_DIR
        folder.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(folder / f"{self.instance}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigError(
                f"audit instance {self.instance!r} is open in another process"
            ) from None
        self._instance_fd = fd

    def _instance_alive(self, instance: str | None) -> bool:
        if instance == self.instance:
            return False  # we hold our own lock: earlier intents of ours are from a dead run
        if instance is None or not _INSTANCE.fullmatch(instance):
            return False
        path = self.data_dir / INSTANCES_DIR / f"{instance}.lock"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    async def _recover(self) -> None:
        """Mirror back-fill (via an empty append round) and interrupted intents."""
        async with self._lock:
            await self._write_locked([])
            db = self._require_db()
            async with db.execute(_OPEN_INTENTS) as cur:
                bodies = [row[0] for row in await cur.fetchall()]
            closes = []
            for body in bodies:
                intent = AuditRecord.from_body(body)
                if await asyncio.to_thread(self._instance_alive, intent.instance):
                    continue
                closes.append(AuditEntry(
                    kind="interrupted", tenant=intent.tenant, user=intent.user,
                    session=intent.session, exec_id=intent.exec_id, tool=intent.tool,
                    decision=intent.decision, rule=intent.rule, image=intent.image,
                    limits=intent.limits,
                    detail=f"no outcome recorded for intent seq {intent.seq} "
                           f"(instance {intent.instance} ended)",
                ))
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
            if (records[0].seq - self._last_cp_seq >= self.checkpoint_every
                    or time.monotonic() - self._last_cp_time >= self.checkpoint_interval_s):
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
            self._write_checkpoint_file(cp)
            return cp

        try:
            cp = await self._on_writer(checkpoint)
        except (OSError, sqlite3.Error) as exc:
            raise AuditUnavailable(f"audit checkpoint failed: {exc}") from None
        self._last_cp_seq, self._last_cp_time = cp.seq, time.monotonic()
        return cp

    def _write_checkpoint_file(self, cp: Checkpoint) -> None:
        path = self.data_dir / CHECKPOINT_NAME
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(canonical_json(cp.model_dump()) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(self.data_dir)

    # -- reading ------------------------------------------------------------------------------

    async def records(
        self, *, tenant: str | None = None, session: str | None = None, tool: str | None = None,
        exec_id: str | None = None, kind: str | None = None, since_seq: int | None = None,
        since_ts: str | None = None, limit: int = 1000, action: str | None = None,
    ) -> list[AuditRecord]:
        """Records in seq order, filtered; `since_seq` is exclusive, `since_ts` inclusive;
        `action` matches records without one (older) as `exec`."""
        db = self._require_db()
        where, params = _filters(tenant=tenant, session=session, tool=tool, exec_id=exec_id,
                                 kind=kind, since_seq=since_seq, since_ts=since_ts,
                                 action=action)
        sql = f"SELECT body FROM audit {where} ORDER BY seq LIMIT ?"
        try:
            async with db.execute(sql, (*params, max(0, limit))) as cur:
                return [AuditRecord.from_body(r[0]) for r in await cur.fetchall()]
        except sqlite3.Error as exc:
            raise AuditUnavailable(f"audit store unreadable: {exc}") from None


def _filters(**kw: object) -> tuple[str, list[object]]:
    clauses, params = [], []
    for name in ("tenant", "session", "tool", "exec_id", "kind"):
        if kw.get(name) is not None:
            clauses.append(f"{name} = ?")
            params.append(kw[name])
    if kw.get("action") is not None:
        clauses.append("COALESCE(json_extract(body, '$.action'), 'exec') = ?")
        params.append(kw["action"])
    if kw.get("since_seq") is not None:
        clauses.append("seq > ?")
        params.append(kw["since_seq"])
    if kw.get("since_ts") is not None:
        clauses.append("ts >= ?")
        params.append(kw["since_ts"])
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", params
