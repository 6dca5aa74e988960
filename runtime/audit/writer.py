"""Appending to the chain in one blocking call: lock, commit, mirror, unlock.

``AuditLog`` runs ``ChainWriter`` calls on one dedicated thread, so an append costs one
thread hop instead of one per SQL statement (the write-ahead intent is on every
execution's path). The writer has its own ``sqlite3`` connection (WAL, ``synchronous=FULL``)
used only from that thread; reads go through ``AuditLog``'s own connection.
"""

from __future__ import annotations

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
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=30000")

    def close(self) -> None:
        self._db.close()

    def append(self, entries: list[AuditEntry]) -> list[AuditRecord]:
        """Commit ``entries`` after the current head, then write (and back-fill) the mirror.

        With no entries this only back-fills the mirror (start-up recovery).
        """
        mirror_seq = self._mirror.lock()
        try:
            records, lines = self._commit(entries, mirror_seq)
            if lines:
                self._mirror.write(lines)
            return records
        finally:
            self._mirror.unlock()

    def checkpoint(self, sign: Callable[[int, str, str], Checkpoint]) -> Checkpoint:
        """Sign the current head and store the checkpoint row."""
        seq, head = self._head()
        cp = sign(seq, head, utc_now())
        self._db.execute(
            "INSERT INTO checkpoints (seq, hash, ts, key_id, signature) VALUES (?,?,?,?,?)",
            (cp.seq, cp.hash, cp.ts, cp.key_id, cp.signature),
        )
        return cp

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
