"""Tamper evidence: any single change to a real audit store is found by verify.

An attacker edits a field (optionally re-hashing the record), deletes a row, swaps two rows
or cuts the tail off, in the database only, or in the database and the JSON-lines mirror
consistently, or in the mirror only. Each is detected, with ``first_bad_seq`` at (or, for a
re-hashed record, right after) the record touched. The one thing not claimed: rolling back
the database, the mirror *and* the signed checkpoint file together (see signing.py).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.audit import AuditEntry, AuditLog, verify_store
from runtime.audit.records import canonical_json, record_hash
from runtime.audit.writer import COLUMNS

N = 12
FIELDS = [
    "seq",
    "ts",
    "kind",
    "tenant",
    "user",
    "session",
    "exec_id",
    "tool",
    "args_sha256",
    "decision",
    "rule",
    "limits",
    "exit_code",
    "timed_out",
    "stdout_sha256",
    "stdout_size",
    "duration_ms",
    "instance",
    "prev_hash",
    "hash",
]


async def _build(path: Path) -> None:
    async with AuditLog(path, checkpoint_every=5) as log:
        for i in range(N // 2):
            await log.append(
                AuditEntry(
                    kind="intent",
                    tenant="acme",
                    user="tok",
                    session="s",
                    exec_id=f"ex_{i}",
                    tool="code_exec",
                    args_sha256="a" * 64,
                    args_size=10,
                    decision="allow",
                    rule="profiles.developer.allow[group:exec]",
                    limits={"memory_mb": 512},
                )
            )
            await log.append(
                AuditEntry(
                    kind="outcome",
                    tenant="acme",
                    session="s",
                    exec_id=f"ex_{i}",
                    tool="code_exec",
                    exit_code=i % 3,
                    timed_out=False,
                    stdout_sha256="b" * 64,
                    stdout_size=i,
                    duration_ms=100 + i,
                )
            )


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("audit") / "data"
    asyncio.run(_build(path))
    assert verify_store(path).ok
    return path


def _rows(conn: sqlite3.Connection) -> list[tuple]:
    return conn.execute(f"SELECT {', '.join(COLUMNS)}, body FROM audit ORDER BY seq").fetchall()


def _write_row(conn: sqlite3.Connection, seq: int, body: dict, rehash: bool) -> None:
    if rehash:
        body["hash"] = record_hash(body)
    cols = {c: body.get(c) for c in COLUMNS if c != "seq"}
    sets = ", ".join(f"{c} = ?" for c in cols)
    conn.execute(
        f"UPDATE audit SET {sets}, body = ? WHERE seq = ?",
        (*cols.values(), canonical_json(body), seq),
    )


def _sync_mirror(conn: sqlite3.Connection, data: Path) -> None:
    bodies = [r[-1] for r in _rows(conn)]
    (data / "audit.jsonl").write_text("".join(b + "\n" for b in bodies))


mutations = st.one_of(
    st.tuples(
        st.just("edit"),
        st.integers(1, N),
        st.sampled_from(FIELDS),
        st.one_of(st.text(max_size=8), st.integers(-5, 99), st.none(), st.booleans()),
        st.sampled_from(["db", "db+mirror", "mirror", "column"]),
        st.booleans(),
    ),
    st.tuples(st.just("delete"), st.integers(1, N), st.sampled_from(["db", "db+mirror"])),
    st.tuples(
        st.just("swap"),
        st.integers(1, N),
        st.integers(1, N),
        st.sampled_from(["db", "db+mirror"]),
        st.booleans(),
    ),
    st.tuples(
        st.just("truncate"),
        st.integers(0, N - 1),
        st.sampled_from(["db", "db+mirror", "db+mirror+table"]),
    ),
)


def _tamper(data: Path, mutation: tuple) -> tuple[int, int] | None:
    """Apply one change; return the range first_bad_seq must fall in (None: no-op)."""
    kind = mutation[0]
    conn = sqlite3.connect(data / "audit.sqlite3")
    try:
        rows = {r[0]: r for r in _rows(conn)}
        if kind == "edit":
            _, seq, field, value, where, rehash = mutation
            body = json.loads(rows[seq][-1])
            if body.get(field) == value or (field == "hash" and rehash):
                return None
            body[field] = value
            if where == "mirror":
                lines = (data / "audit.jsonl").read_text().splitlines()
                lines[seq - 1] = canonical_json(body)
                (data / "audit.jsonl").write_text("".join(x + "\n" for x in lines))
                return (seq, seq)
            if where == "column":
                if field not in COLUMNS or field == "seq":
                    return None
                conn.execute(f"UPDATE audit SET {field} = ? WHERE seq = ?", (value, seq))
                conn.commit()
                return (seq, seq)
            if field == "seq":
                body_seq_only = canonical_json(body)
                conn.execute("UPDATE audit SET body = ? WHERE seq = ?", (body_seq_only, seq))
            else:
                _write_row(conn, seq, body, rehash)
            expected = (seq, seq + 1 if rehash else seq)
        elif kind == "delete":
            _, seq, where = mutation
            conn.execute("DELETE FROM audit WHERE seq = ?", (seq,))
            expected = (seq, seq)
        elif kind == "swap":
            _, i, j, where, rehash = mutation
            if i == j:
                return None
            bi, bj = json.loads(rows[i][-1]), json.loads(rows[j][-1])
            if rehash:  # a careful attacker also fixes up seq and the links
                bi["seq"], bj["seq"] = j, i
            _write_row(conn, i, bj, rehash)
            _write_row(conn, j, bi, rehash)
            lo = min(i, j)
            expected = (lo, lo + 1 if rehash else lo)
        else:
            _, keep, where = mutation
            conn.execute("DELETE FROM audit WHERE seq > ?", (keep,))
            if where == "db+mirror+table":
                conn.execute("DELETE FROM checkpoints WHERE seq > ?", (keep,))
            expected = (keep + 1, keep + 1)
        conn.commit()
        if where != "db":
            _sync_mirror(conn, data)
        return expected
    except sqlite3.IntegrityError:  # the schema refuses this change (e.g. a NULL ts)
        return None
    finally:
        conn.close()


@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(mutation=mutations)
def test_any_single_change_is_detected(pristine: Path, mutation: tuple) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        shutil.copytree(pristine, data)
        expected = _tamper(data, mutation)
        report = verify_store(data)
        if expected is None:
            assert report.ok
            return
        assert not report.ok, (mutation, report)
        low, high = expected
        assert report.first_bad_seq is not None, (mutation, report)
        assert low <= report.first_bad_seq <= high, (mutation, report)


def test_truncating_the_tail_is_caught_by_the_checkpoint_file(pristine: Path) -> None:
    """Even with the checkpoints table emptied and the mirror rewritten to match."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        shutil.copytree(pristine, data)
        with sqlite3.connect(data / "audit.sqlite3") as conn:
            conn.execute("DELETE FROM audit WHERE seq > 9")
            conn.execute("DELETE FROM checkpoints")
            _sync_mirror(conn, data)
        report = verify_store(data)
        assert not report.ok and report.first_bad_seq == 10
        assert "removed" in (report.reason or "")


def test_a_forged_checkpoint_file_is_rejected(pristine: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        shutil.copytree(pristine, data)
        cp = json.loads((data / "audit.checkpoint.json").read_text())
        cp["seq"] = 5
        (data / "audit.checkpoint.json").write_text(json.dumps(cp))
        report = verify_store(data)
        assert not report.ok and "signature" in (report.reason or "")
