"""A consistent copy of a live audit log (database, mirror, checkpoint file), and who holds it.

How the copy stays consistent while servers keep appending. Writers take the mirror's
``flock`` around ``BEGIN IMMEDIATE … COMMIT`` and the mirror write (``runtime.audit.writer``).
Two ways to copy under that protocol: hold the same lock for the whole copy, or copy the
database with SQLite's online backup API and then cut the mirror to exactly the records the
copied database holds. We do the second:

- Holding the lock stops every audit append, and with it every execution (the write-ahead
  intent is on each call's path, fail-closed), for as long as the copy takes, which grows
  with the log. The backup API in one step (``pages=-1``) reads one WAL snapshot: writers
  go on, the copy is the database as of one commit, never a torn page.
- The mirror is append-only and line *n* is record *n*, so the first ``head_seq`` complete
  lines are exactly the copied records (later lines belong to records the copy lacks and
  are left out). Only when fewer lines are there yet (a writer between its commit and its
  mirror write) do we take the lock, shared, to wait out that one append, then read the
  rest. A mirror that still lags (a crash before the back-fill) is copied as it is:
  ``verify`` accepts a lagging mirror, as it does on the live one.
- ``audit.checkpoint.json`` is written by the checkpoint path outside the mirror lock, so a
  copy of the live file may pin a seq the copied database does not reach (``verify`` would
  then say records were removed). The copy's file is made from the copied database's latest
  signed ``checkpoints`` row instead: the same bytes the writer puts there.

The copy is a single file per database (rollback journal, no ``-wal``/``-shm``); a server
opening it switches it back to WAL.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel

from runtime.audit.layout import CHECKPOINT_NAME, DB_NAME, MIRROR_NAME
from runtime.audit.mirror import fsync_dir
from runtime.audit.records import GENESIS_HASH, canonical_json
from runtime.audit.signing import Checkpoint

__all__ = ["AuditCopy", "backup_audit", "fsync_file", "sqlite_backup", "write_new_file"]
_CHUNK = 1 << 20


class AuditCopy(BaseModel):
    """What ``backup_audit`` copied."""

    records: int
    head_seq: int
    head_hash: str
    mirror_lines: int
    mirror_waited: bool  # the tail was read under the writers' lock
    checkpoint_seq: int | None


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sqlite_backup(src: Path, dst: Path) -> None:
    """Copy the database ``src`` to the new file ``dst`` (0600) with SQLite's online backup.

    One step (``pages=-1``): a single read snapshot, so concurrent writers (WAL) neither wait
    nor restart it. The copy is switched to a rollback journal, checked and fsync'd.
    """
    os.close(os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    source = sqlite3.connect(f"{src.absolute().as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        with closing(sqlite3.connect(dst, isolation_level=None)) as target:
            source.backup(target, pages=-1)
            target.execute("PRAGMA journal_mode=DELETE")
            problem = target.execute("PRAGMA quick_check").fetchone()[0]
            if problem != "ok":
                raise sqlite3.DatabaseError(f"copy of {src.name} failed its check: {problem}")
    finally:
        source.close()
    fsync_file(dst)


def backup_audit(data_dir: Path, dest: Path) -> AuditCopy:
    """Copy the audit log of ``data_dir`` into the directory ``dest`` (see the module doc)."""
    sqlite_backup(data_dir / DB_NAME, dest / DB_NAME)
    with closing(sqlite3.connect(f"{(dest / DB_NAME).absolute().as_uri()}?mode=ro",
                                 uri=True)) as conn:
        count = conn.execute("SELECT COUNT(*) FROM audit").fetchone()[0]
        head = conn.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
        row = conn.execute("SELECT seq, hash, ts, key_id, signature FROM checkpoints "
                           "ORDER BY id DESC LIMIT 1").fetchone()
    head_seq, head_hash = (head[0], head[1]) if head else (0, GENESIS_HASH)
    lines, waited = _copy_mirror(data_dir / MIRROR_NAME, dest / MIRROR_NAME, head_seq)
    cp_seq = None
    if row is not None:
        cp = Checkpoint(seq=row[0], hash=row[1], ts=row[2], key_id=row[3], signature=row[4])
        write_new_file(dest / CHECKPOINT_NAME,
                       (canonical_json(cp.model_dump()) + "\n").encode())
        cp_seq = cp.seq
    fsync_dir(dest)
    return AuditCopy(records=count, head_seq=head_seq, head_hash=head_hash, mirror_lines=lines,
                     mirror_waited=waited, checkpoint_seq=cp_seq)


def _copy_mirror(src: Path, dst: Path, want: int) -> tuple[int, bool]:
    """Copy the first ``want`` complete lines of ``src``; (lines copied, waited for the lock)."""
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as out:
        if not src.exists():
            return 0, False
        with src.open("rb") as fh:
            lines, offset = _copy_lines(fh.fileno(), out, want, 0, 0)
            waited = False
            if lines < want:  # a writer between commit and mirror write: wait it out
                waited = True
                fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
                try:
                    lines, offset = _copy_lines(fh.fileno(), out, want, lines, offset)
                finally:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        out.flush()
        os.fsync(out.fileno())
    return lines, waited


def _copy_lines(fd: int, out: BinaryIO, want: int, lines: int, offset: int) -> tuple[int, int]:
    """Append complete lines from ``offset`` on until ``want`` lines are copied or the file
    ends (an incomplete last line is never copied); returns (lines, new offset)."""
    pending = b""
    while lines < want:
        chunk = os.pread(fd, _CHUNK, offset + len(pending))
        if not chunk:
            break
        pending += chunk
        start = 0
        while lines < want:
            cut = pending.find(b"\n", start)
            if cut == -1:
                break
            start = cut + 1
            lines += 1
        out.write(pending[:start])
        offset += start
        pending = pending[start:]
    return lines, offset


def write_new_file(path: Path, data: bytes) -> None:
    """Write ``data`` to a new 0600 file (never over an existing one), fsync'd."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
