"""Appending to the chain in one blocking call: lock, commit, mirror, unlock.

``AuditLog`` runs ``ChainWriter`` calls on one dedicated thread, so an append costs one
thread hop instead of one per SQL statement (the write-ahead intent is on every
execution's path). The writer has its own ``sqlite3`` connection (WAL) used only from that
thread; reads go through ``AuditLog``'s own connection.

Group commit: a *durable* append commits with ``synchronous=FULL`` (the WAL is fsync'd, and
with it every frame before it); a *lazy* one (an execution's outcome) commits with
``synchronous=NORMAL``: written and visible at once, it survives the process being killed,
and becomes durable against a power loss with the next durable append or ``sync()``. The
mirror is written on every append and fsync'd by ``sync()``: the database is the record of
truth, and a mirror that lost its tail is back-filled from it at the next append or open.
So an execution costs one fsync on its path: its intent's, before it starts.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from runtime.audit.mirror import Mirror
from runtime.audit.records import (
    GENESIS_HASH,
    AuditEntry,
    AuditRecord,
    canonical_json,
    record_hash,
    utc_now,
)
from runtime.audit.signing import Checkpoint

COLUMNS = ("seq", "ts", "kind", "tenant", "session", "exec_id", "tool", "instance",
           "prev_hash", "hash")
_INSERT = (f"INSERT INTO audit ({', '.join(COLUMNS)}, body)"
           f" VALUES ({', '.join('?' * (len(COLUMNS) + 1))})")
_HEAD = "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1"


class ChainWriter:
    """The only writer of ``audit`` and ``checkpoints`` rows in this process."""

    def __init__(self, db_path: Path, mirror: Mirror, instance: str) -> None:
        self.instance = instance
        self.head: tuple[int, str] = (0, GENESIS_HASH)  # after the last commit
        self._mirror = mirror
        self._db = sqlite3.connect(db_path, isolation_level=None, timeout=30,
                                   check_same_thread=False)  # one dedicated thread uses it
        self._wal_path = Path(f"{db_path}-wal")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._full = False
        self._use_full_sync(True)
        self._db_unsynced = False  # lazy commits not yet fsync'd
        self._mirror_unsynced = False  # mirror lines not yet fsync'd

    @property
    def unsynced(self) -> bool:
        """Something this writer committed or mirrored is not yet fsync'd."""
        return self._db_unsynced or self._mirror_unsynced

    def close(self) -> None:
        self._db.close()

    def append(self, entries: list[AuditEntry], *, durable: bool = True) -> list[AuditRecord]:
        """Commit ``entries`` after the current head, then write (and back-fill) the mirror.

        ``durable``: the commit is fsync'd (with every lazy one before it) when this returns.
        With no entries this only back-fills the mirror (start-up recovery).
        """
        self._use_full_sync(durable)
        mirror_seq = self._mirror.lock()
        try:
            records, lines = self._commit(entries, mirror_seq)
            if entries:
                self._db_unsynced = not durable
            if lines:
                self._mirror.write(lines, self.head[0])
                self._mirror_unsynced = True
            return records
        finally:
            self._mirror.unlock()

    def sync(self) -> None:
        """Make every commit and mirror line so far durable (fsync the WAL and the mirror)."""
        if self._db_unsynced:
            try:
                fd = os.open(self._wal_path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:  # checkpointed into the database file, which is synced
                pass
            else:
                try:
                    os.fsync(fd)  # the file's dirty pages, whichever descriptor wrote them
                finally:
                    os.close(fd)
            self._db_unsynced = False
        if self._mirror_unsynced:
            self._mirror.sync()
            self._mirror_unsynced = False

    def checkpoint(self, sign: Callable[[int, str, str], Checkpoint]) -> Checkpoint:
        """Sign the current head and store the checkpoint row (durably)."""
        self._use_full_sync(True)
        seq, head = self._head()
        cp = sign(seq, head, utc_now())
        self._db.execute(
            "INSERT INTO checkpoints (seq, hash, ts, key_id, signature) VALUES (?,?,?,?,?)",
            (cp.seq, cp.hash, cp.ts, cp.key_id, cp.signature),
        )
        return cp

    def _use_full_sync(self, full: bool) -> None:
        if full != self._full:
            self._db.execute(f"PRAGMA synchronous={'FULL' if full else 'NORMAL'}")
            self._full = full

    def _head(self) -> tuple[int, str]:
        row = self._db.execute(_HEAD).fetchone()
        return (row[0], row[1]) if row else (0, GENESIS_HASH)

    def _commit(
        self, entries: list[AuditEntry], mirror_seq: int | None
    ) -> tuple[list[AuditRecord], list[str]]:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            seq, prev = self._head()
            lines: list[str] = []  # back-fill first: what the mirror lacks
            if mirror_seq is not None and mirror_seq < seq:
                lines = [r[0] for r in db.execute(
                    "SELECT body FROM audit WHERE seq > ? ORDER BY seq", (mirror_seq,))]
            records = []
            for entry in entries:
                seq += 1
                body = entry.model_dump(mode="json")
                body.update(seq=seq, ts=utc_now(), instance=self.instance, prev_hash=prev)
                body["hash"] = prev = record_hash(body)
                text = canonical_json(body)
                db.execute(_INSERT, tuple(body[c] for c in COLUMNS) + (text,))
                records.append(AuditRecord.model_validate(body))
                lines.append(text)
            db.execute("COMMIT")
            self.head = (seq, prev)
        except BaseException:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise
        return records, lines
