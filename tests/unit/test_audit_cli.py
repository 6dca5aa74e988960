"""`navi audit verify` and `navi audit export` on a real audit store."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from typer.testing import CliRunner

from runtime.audit import AuditEntry, AuditLog
from runtime.cli import app

runner = CliRunner()


async def _fill(data: Path, n: int = 5) -> None:
    async with AuditLog(data) as log:
        for i in range(n):
            await log.append(AuditEntry(kind="denied", tenant="t", tool=f"tool{i}",
                                        rule="default.deny"))


async def test_verify_ok_then_tampered(tmp_path: Path) -> None:
    await _fill(tmp_path)
    ok = runner.invoke(app, ["audit", "verify", "--data-dir", str(tmp_path)])
    assert ok.exit_code == 0 and "ok: 5 records verified" in ok.output
    with sqlite3.connect(tmp_path / "audit.sqlite3") as conn:
        body = conn.execute("SELECT body FROM audit WHERE seq = 3").fetchone()[0]
        conn.execute("UPDATE audit SET body = ? WHERE seq = 3",
                     (body.replace("tool2", "tool9"),))
    bad = runner.invoke(app, ["audit", "verify", "--data-dir", str(tmp_path)])
    assert bad.exit_code == 1
    assert "first bad record: seq 3" in bad.output
    report = json.loads(runner.invoke(app, ["audit", "verify", "--data-dir", str(tmp_path),
                                            "--json"]).output)
    assert report["ok"] is False and report["first_bad_seq"] == 3


async def test_verify_unreadable_store(tmp_path: Path) -> None:
    (tmp_path / "audit.sqlite3").write_bytes(b"not a database at all" * 100)
    result = runner.invoke(app, ["audit", "verify", "--data-dir", str(tmp_path)])
    assert result.exit_code in (1, 2) and "Traceback" not in result.output


async def test_export_since(tmp_path: Path) -> None:
    await _fill(tmp_path)
    result = runner.invoke(app, ["audit", "export", "--data-dir", str(tmp_path),
                                 "--format", "jsonl", "--since", "3"])
    assert result.exit_code == 0
    seqs = [json.loads(x)["seq"] for x in result.stdout.splitlines() if x.startswith("{")]
    assert seqs == [4, 5]
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["audit", "export", "--data-dir", str(tmp_path),
                                 "--since", "2000-01-01T00:00:00Z", "-o", str(out)])
    assert result.exit_code == 0 and len(out.read_text().splitlines()) == 5
    assert runner.invoke(app, ["audit", "export", "--data-dir", str(tmp_path),
                               "--since", "yesterday"]).exit_code == 2
    assert runner.invoke(app, ["audit", "export", "--data-dir", str(tmp_path),
                               "--format", "csv"]).exit_code == 2
