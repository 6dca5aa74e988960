"""Recompute the audit chain of a data dir, read-only: hashes, links, checkpoints, mirror.

Checks, streaming in `seq` order (memory does not grow with the log):

- each row: `seq` is the next integer, the stored columns equal the JSON body, the body's
  `prev_hash` is the previous record's `hash`, and `hash` is the SHA-256 of the body;
- each signed checkpoint (database table and ``audit.checkpoint.json``): the signature is
  valid and the record at its `seq` has its `hash`; a checkpoint beyond the last record means
  the tail was cut off;
- the JSON-lines mirror: line *n* is byte-identical to record *n*; the mirror may lag by the
  lines a crash kept it from writing, but a mirror line the database lacks means the
  database lost records.

``first_bad_seq`` is the smallest seq found wrong (for a cut tail: the first missing one).
The report also counts each tenant's records and keeps, per tenant, the first of its records
found wrong (`for_tenant`): the chain is one, so a tenant's answer is the whole chain's `ok`
with only its own figures.
Blocking: call it through ``asyncio.to_thread`` from async code.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel, Field, ValidationError

from runtime.audit.layout import CHECKPOINT_NAME, DB_NAME, MIRROR_NAME
from runtime.audit.records import GENESIS_HASH, record_hash
from runtime.audit.signing import Checkpoint, load_verifier
from runtime.audit.writer import COLUMNS
from runtime.errors import AuditUnavailable


class VerifyReport(BaseModel):
    ok: bool
    records: int
    first_bad_seq: int | None = None
    reason: str | None = None
    head_seq: int = 0
    head_hash: str = GENESIS_HASH
    checkpoints: int = 0
    mirror_records: int = 0
    tenant_records: dict[str, int] = Field(default_factory=dict, exclude=True)
    tenant_first_bad: dict[str, int] = Field(default_factory=dict, exclude=True)

    def public(self) -> dict[str, Any]:
        """The body of ``GET /v1/audit/verify`` for the operator: the whole log's figures."""
        return {"ok": self.ok, "records": self.records, "first_bad_seq": self.first_bad_seq}

    def for_tenant(self, tenant: str) -> dict[str, Any]:
        """The body for one tenant: whether the chain verifies (one chain: a break anywhere
        is a break), how many records are its own, and the first of them found wrong."""
        return {"ok": self.ok, "records": self.tenant_records.get(tenant, 0),
                "first_bad_seq": self.tenant_first_bad.get(tenant)}


class _Findings:
    def __init__(self) -> None:
        self.seq: int | None = None
        self.reason: str | None = None
        self.fatal: str | None = None
        self.hits: set[int] = set()  # seqs flagged since the last `clear`

    def bad(self, seq: int, reason: str) -> None:
        self.hits.add(seq)
        if self.seq is None or seq < self.seq:
            self.seq, self.reason = seq, reason


def connect_readonly(data_dir: Path) -> sqlite3.Connection | None:
    path = Path(data_dir) / DB_NAME
    if not path.exists():
        return None
    try:
        return sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=30)
    except sqlite3.Error as exc:
        raise AuditUnavailable(f"cannot open audit store: {exc}") from None


def _checkpoints(
    conn: sqlite3.Connection | None, data_dir: Path, found: _Findings
) -> list[Checkpoint]:
    cps: list[Checkpoint] = []
    if conn is not None:
        for seq, head, ts, key_id, sig in conn.execute(
            "SELECT seq, hash, ts, key_id, signature FROM checkpoints ORDER BY id"
        ):
            cps.append(Checkpoint(seq=seq, hash=head, ts=ts, key_id=key_id, signature=sig))
    path = data_dir / CHECKPOINT_NAME
    if path.exists():
        try:
            cps.append(Checkpoint.model_validate_json(path.read_text("ascii")))
        except (OSError, ValueError, ValidationError):
            found.fatal = f"{CHECKPOINT_NAME} is unreadable or malformed"
    return cps


def _mirror_lines(path: Path) -> Iterator[str]:
    """Complete lines of the mirror (a torn last line from a crash is skipped)."""
    if not path.exists():
        return
    with path.open("r", encoding="ascii", errors="replace", newline="\n") as fh:
        for line in fh:
            if line.endswith("\n"):
                yield line[:-1]


def verify_store(data_dir: Path, public_key: Path | None = None) -> VerifyReport:
    data_dir = Path(data_dir)
    found = _Findings()
    conn = connect_readonly(data_dir)
    try:
        return _verify(conn, data_dir, public_key, found)
    except sqlite3.DatabaseError as exc:
        return VerifyReport(ok=False, records=0, reason=f"audit database unreadable: {exc}")
    finally:
        if conn is not None:
            conn.close()


def _verify(
    conn: sqlite3.Connection | None, data_dir: Path, public_key: Path | None, found: _Findings
) -> VerifyReport:
    verifier = load_verifier(data_dir, public_key)
    cps = _checkpoints(conn, data_dir, found)
    pinned: dict[int, set[str]] = {}
    for cp in cps:
        if verifier is None:
            found.fatal = found.fatal or "checkpoints exist but no public key to verify them"
        elif not verifier.check(cp):
            found.bad(max(cp.seq, 1), f"checkpoint for seq {cp.seq} has an invalid signature")
            continue
        pinned.setdefault(cp.seq, set()).add(cp.hash)
    if pinned.get(0, {GENESIS_HASH}) != {GENESIS_HASH}:
        found.bad(1, "checkpoint at seq 0 does not pin the genesis hash")
    early, found.hits = found.hits, set()  # records named by a bad checkpoint
    per_tenant: dict[str, int] = {}
    first_bad: dict[str, int] = {}
    tenant_at = COLUMNS.index("tenant")

    rows: Iterator[tuple[Any, ...]] = conn.execute(
        f"SELECT {', '.join(COLUMNS)}, body FROM audit ORDER BY seq"
    ) if conn is not None else iter(())
    mirror = _mirror_lines(data_dir / MIRROR_NAME)
    mirror_count = 0
    count, expected, prev = 0, 1, GENESIS_HASH
    for row in rows:
        count += 1
        seq, text = row[0], row[-1]
        line = next(mirror, None)
        if line is not None:
            mirror_count += 1
            if line != text:
                found.bad(seq if seq == expected else min(seq, expected),
                          f"record {expected}: mirror line differs from the database")
        if seq != expected:
            found.bad(min(seq, expected), f"expected seq {expected}, found {seq}")
            expected = seq
        problem = _check_row(row, prev)
        if problem:
            found.bad(seq, f"record {seq}: {problem}")
        hashes = pinned.get(seq)
        if hashes is not None and hashes != {row[COLUMNS.index("hash")]}:
            found.bad(seq, f"record {seq} differs from the signed checkpoint")
        prev = row[COLUMNS.index("hash")]
        expected += 1
        tenant = str(row[tenant_at])
        per_tenant[tenant] = per_tenant.get(tenant, 0) + 1
        if seq in found.hits or seq in early:
            for owner in {tenant, _body_tenant(text)} - {None}:
                first_bad.setdefault(str(owner), seq)
        found.hits.clear()
    head = expected - 1
    extra = next(mirror, None)
    if extra is not None:
        mirror_count += 1 + sum(1 for _ in mirror)
        found.bad(head + 1, f"records after {head} are in the mirror but not in the database")
    beyond = [s for s in pinned if s > head]
    if beyond:
        found.bad(head + 1, f"a signed checkpoint pins seq {max(beyond)} but the log ends at "
                            f"{head}: records were removed")
    ok = found.seq is None and found.fatal is None
    return VerifyReport(
        ok=ok, records=count, first_bad_seq=found.seq, reason=found.reason or found.fatal,
        head_seq=head, head_hash=prev, checkpoints=len(cps), mirror_records=mirror_count,
        tenant_records=per_tenant, tenant_first_bad=first_bad,
    )


def _body_tenant(text: str) -> str | None:
    """The tenant a bad record's body names (its column may be what was changed)."""
    try:
        body = json.loads(text)
    except ValueError:
        return None
    tenant = body.get("tenant") if isinstance(body, dict) else None
    return tenant if isinstance(tenant, str) else None


def _check_row(row: tuple[Any, ...], prev: str) -> str | None:
    text = row[-1]
    try:
        body = json.loads(text)
    except ValueError:
        return "body is not JSON"
    if not isinstance(body, dict):
        return "body is not an object"
    for name, value in zip(COLUMNS, row[:-1], strict=True):
        if body.get(name) != value:
            return f"column {name} does not match the record body"
    if body.get("prev_hash") != prev:
        return "prev_hash does not link to the previous record"
    try:
        if record_hash(body) != body.get("hash"):
            return "hash does not match the record's content"
    except ValueError:
        return "body cannot be hashed"
    return None


def export_jsonl(
    data_dir: Path, out: TextIO, *, since_seq: int | None = None, since_ts: str | None = None
) -> int:
    """Write the records (canonical JSON, one per line) to `out`; returns how many."""
    conn = connect_readonly(Path(data_dir))
    if conn is None:
        return 0
    sql, params = "SELECT body FROM audit", list[object]()
    clauses = []
    if since_seq is not None:
        clauses.append("seq > ?")
        params.append(since_seq)
    if since_ts is not None:
        clauses.append("ts >= ?")
        params.append(since_ts)
    if clauses:
        sql += " WHERE " + " AND ".join(clauses)
    count = 0
    with closing(conn):
        try:
            for (body,) in conn.execute(sql + " ORDER BY seq", params):
                out.write(body + "\n")
                count += 1
        except sqlite3.Error as exc:
            raise AuditUnavailable(f"audit store unreadable: {exc}") from None
    return count
