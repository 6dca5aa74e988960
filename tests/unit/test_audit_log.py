"""AuditLog on a real SQLite file: chain, gap-free seq, recovery, mirror, checkpoints, keys."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from runtime.audit import AuditEntry, AuditLog, export_jsonl, verify_store
from runtime.audit.records import GENESIS_HASH, record_hash
from runtime.errors import ConfigError


def entry(i: int = 0, kind: str = "intent", **kw) -> AuditEntry:
    return AuditEntry(kind=kind, tenant="t", session="s", exec_id=f"e{i}", tool="code_exec", **kw)


def lines(data: Path) -> list[dict]:
    return [json.loads(x) for x in (data / "audit.jsonl").read_text().splitlines()]


async def test_chain_links_and_hashes(tmp_path: Path) -> None:
    async with AuditLog(tmp_path) as log:
        a = await log.append(entry(1))
        b = await log.append(entry(1, kind="outcome", exit_code=0))
    assert (a.seq, b.seq) == (1, 2)
    assert a.prev_hash == GENESIS_HASH and b.prev_hash == a.hash
    body = lines(tmp_path)[1]
    assert body["hash"] == b.hash == record_hash(body)
    assert body["exit_code"] == 0 and lines(tmp_path)[0]["exit_code"] is None
    report = verify_store(tmp_path)
    assert report.ok and report.records == 2 and report.first_bad_seq is None
    assert report.public() == {"ok": True, "records": 2, "first_bad_seq": None}


async def test_concurrent_appends_are_gap_free(tmp_path: Path) -> None:
    async with AuditLog(tmp_path) as log:
        records = await asyncio.gather(*(log.append(entry(i)) for i in range(200)))
    assert sorted(r.seq for r in records) == list(range(1, 201))
    assert [x["seq"] for x in lines(tmp_path)] == list(range(1, 201))
    assert verify_store(tmp_path).ok


async def test_two_logs_on_one_dir_interleave_safely(tmp_path: Path) -> None:
    async with AuditLog(tmp_path, instance="a1") as a, AuditLog(tmp_path, instance="b1") as b:
        await asyncio.gather(*(x.append(entry(i)) for i in range(50) for x in (a, b)))
    assert [x["seq"] for x in lines(tmp_path)] == list(range(1, 101))
    assert verify_store(tmp_path).ok


async def test_reopen_continues_the_chain(tmp_path: Path) -> None:
    async with AuditLog(tmp_path) as log:
        first = await log.append(entry(1, kind="denied"))
    async with AuditLog(tmp_path) as log:
        second = await log.append(entry(2, kind="denied"))
        assert log.head == (2, second.hash)
    assert second.prev_hash == first.hash and verify_store(tmp_path).ok


async def test_interrupted_intents_are_closed_at_start(tmp_path: Path) -> None:
    async with AuditLog(tmp_path, instance="old") as log:
        await log.append(entry(1))
        await log.append(entry(1, kind="outcome", exit_code=0))
        await log.append(entry(2))  # never finished
    with capture_logs() as logs:
        async with AuditLog(tmp_path) as log:
            closed = await log.records(kind="interrupted")
    assert [(r.exec_id, r.tool, r.tenant) for r in closed] == [("e2", "code_exec", "t")]
    assert "intent seq 3" in (closed[0].detail or "")
    assert any(e["event"] == "audit_interrupted_closed" for e in logs)
    assert verify_store(tmp_path).ok
    async with AuditLog(tmp_path) as log:  # closed once, not again
        assert len(await log.records(kind="interrupted")) == 1


async def test_a_live_instance_is_never_closed_by_another(tmp_path: Path) -> None:
    async with AuditLog(tmp_path, instance="live") as live:
        await live.append(entry(7))
        async with AuditLog(tmp_path, instance="other") as other:
            assert await other.records(kind="interrupted") == []
        await live.append(entry(7, kind="outcome", exit_code=0))
    assert verify_store(tmp_path).ok


async def test_a_restart_under_the_same_instance_id_closes_its_own_open_intents(
        tmp_path: Path) -> None:
    """We hold our own instance lock while recovering: its intents are from the dead run."""
    async with AuditLog(tmp_path, instance="srv") as log:
        await log.append(entry(1))
    async with AuditLog(tmp_path, instance="srv") as log:
        closed = await log.records(kind="interrupted")
        assert [(r.exec_id, r.instance) for r in closed] == [("e1", "srv")]
    assert verify_store(tmp_path).ok


async def test_same_instance_twice_is_refused(tmp_path: Path) -> None:
    async with AuditLog(tmp_path, instance="dup"):
        with pytest.raises(ConfigError, match="another process"):
            await AuditLog(tmp_path, instance="dup").open()
    with pytest.raises(ConfigError):
        AuditLog(tmp_path, instance="../x")


async def test_mirror_torn_line_is_cut_and_missing_lines_back_filled(tmp_path: Path) -> None:
    async with AuditLog(tmp_path) as log:
        for i in range(5):
            await log.append(entry(i, kind="denied"))
    mirror = tmp_path / "audit.jsonl"
    text = mirror.read_text().splitlines(keepends=True)
    # as if a crash: record 5 committed but only half its line written, 4 fully missing
    mirror.write_text("".join(text[:3]) + text[4][:40])
    assert verify_store(tmp_path).ok  # a lagging mirror is not tampering
    async with AuditLog(tmp_path) as log:
        await log.append(entry(9, kind="denied"))
    assert [x["seq"] for x in lines(tmp_path)] == [1, 2, 3, 4, 5, 6]
    assert verify_store(tmp_path).ok


async def test_records_filters(tmp_path: Path) -> None:
    async with AuditLog(tmp_path) as log:
        await log.append(AuditEntry(kind="denied", tenant="a", session="s1", tool="x"))
        await log.append(AuditEntry(kind="denied", tenant="b", session="s2", tool="y"))
        await log.append(AuditEntry(kind="denied", tenant="a", session="s3", tool="y"))
        assert [r.seq for r in await log.records(tenant="a")] == [1, 3]
        assert [r.seq for r in await log.records(tenant="a", tool="y")] == [3]
        assert [r.seq for r in await log.records(session="s2")] == [2]
        assert [r.seq for r in await log.records(since_seq=1)] == [2, 3]
        assert [r.seq for r in await log.records(limit=1)] == [1]
        ts = (await log.records())[1].ts
        assert [r.seq for r in await log.records(since_ts=ts)] == [2, 3]


async def test_checkpoints_signed_periodically_and_at_close(tmp_path: Path) -> None:
    async with AuditLog(tmp_path, checkpoint_every=10) as log:
        for i in range(25):
            await log.append(entry(i))
    with sqlite3.connect(tmp_path / "audit.sqlite3") as conn:
        seqs = [r[0] for r in conn.execute("SELECT seq FROM checkpoints ORDER BY id")]
    assert seqs == [10, 20, 25]
    cp = json.loads((tmp_path / "audit.checkpoint.json").read_text())
    assert cp["seq"] == 25 and cp["signature"]
    report = verify_store(tmp_path)
    assert report.ok and report.checkpoints == 4  # three in the table + the file


async def test_key_created_private_and_kept(tmp_path: Path) -> None:
    async with AuditLog(tmp_path):
        pass
    key = tmp_path / "keys" / "audit-ed25519.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    before = key.read_bytes()
    os.chmod(key, 0o644)
    async with AuditLog(tmp_path):
        pass
    assert key.read_bytes() == before and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "audit.sqlite3").stat().st_mode) == 0o600


async def test_a_different_key_fails_verification(tmp_path: Path) -> None:
    async with AuditLog(tmp_path) as log:
        await log.append(entry(1))
    other = tmp_path / "other"
    async with AuditLog(other):
        pass
    report = verify_store(tmp_path, public_key=other / "keys" / "audit-ed25519.pub")
    assert not report.ok and "signature" in (report.reason or "")
    assert verify_store(tmp_path, public_key=tmp_path / "keys" / "audit-ed25519.pub").ok


async def test_control_characters_are_escaped_in_records(tmp_path: Path) -> None:
    async with AuditLog(tmp_path) as log:
        await log.append(AuditEntry(kind="denied", tenant="t", tool="x",
                                    reason="line\nbreak\x1b[31m\u2028é"))
    raw = (tmp_path / "audit.jsonl").read_bytes()
    assert raw.count(b"\n") == 1 and b"\x1b" not in raw and raw.isascii()
    assert json.loads(raw)["reason"] == "line\nbreak\x1b[31m\u2028é"


async def test_export(tmp_path: Path) -> None:
    async with AuditLog(tmp_path) as log:
        for i in range(4):
            await log.append(entry(i))
    out = io.StringIO()
    assert export_jsonl(tmp_path, out, since_seq=2) == 2
    assert [json.loads(x)["seq"] for x in out.getvalue().splitlines()] == [3, 4]
    assert export_jsonl(tmp_path / "empty", io.StringIO()) == 0


def test_verify_of_an_empty_dir(tmp_path: Path) -> None:
    report = verify_store(tmp_path)
    assert report.ok and report.records == 0


async def test_reopened_log_knows_its_head(tmp_path: Path) -> None:
    async with AuditLog(tmp_path) as log:
        last = await log.append(AuditEntry(kind="denied", tenant="t", rule="default.deny"))
    async with AuditLog(tmp_path) as log:
        assert log.head == (last.seq, last.hash)


def _fsynced_paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the files fsync'd from Python from now on (SQLite's own fsyncs are in C)."""
    seen: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        seen.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return seen


async def test_outcomes_are_group_committed_within_the_sync_delay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with AuditLog(tmp_path, sync_delay_s=0.3) as log:
        await log.append(entry(1))  # the intent: its commit is fsync'd (synchronous=FULL)
        fsynced = _fsynced_paths(monkeypatch)
        outcome = await log.append(entry(1, kind="outcome", exit_code=0), durable=False)
        # committed and readable at once; not fsync'd yet
        assert [r.seq for r in await log.records(kind="outcome")] == [outcome.seq]
        assert [x["seq"] for x in lines(tmp_path)] == [1, 2]
        assert fsynced == []
        await asyncio.sleep(0.6)
        assert sorted(fsynced) == ["audit.jsonl", "audit.sqlite3-wal"]
        fsynced.clear()
        await asyncio.sleep(0.4)
        assert fsynced == []  # nothing new, no fsync


async def test_close_makes_lazy_records_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = await AuditLog(tmp_path, sync_delay_s=3600).__aenter__()
    await log.append(entry(1, kind="outcome", exit_code=0), durable=False)
    fsynced = _fsynced_paths(monkeypatch)
    await log.close()
    assert "audit.jsonl" in fsynced  # the checkpoint's commit is FULL; the mirror is synced
    assert verify_store(tmp_path).ok


def test_a_killed_process_keeps_its_lazy_outcome(tmp_path: Path) -> None:
    """Group commit risks the window before the fsync only to a power loss: a process killed
    right after a lazy append leaves the record in the OS's page cache, so it is kept."""
    script = (
        "import asyncio, os, sys\n"
        "from pathlib import Path\n"
        "from runtime.audit import AuditEntry, AuditLog\n"
        "async def main():\n"
        "    log = AuditLog(Path(sys.argv[1]), instance='gone', sync_delay_s=3600)\n"
        "    await log.open()\n"
        "    e = dict(tenant='t', session='s', exec_id='e1', tool='code_exec')\n"
        "    await log.append(AuditEntry(kind='intent', **e))\n"
        "    await log.append(AuditEntry(kind='outcome', exit_code=0, **e), durable=False)\n"
        "    os._exit(0)  # no close, no sync\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                          timeout=60, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr.decode()

    async def reopen() -> tuple[list[str], bool]:
        async with AuditLog(tmp_path) as log:
            kinds = [r.kind for r in await log.records()]
        return kinds, verify_store(tmp_path).ok

    kinds, ok = asyncio.run(reopen())
    assert kinds == ["intent", "outcome"] and ok
