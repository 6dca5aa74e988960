"""`navi backup` against a real `navi serve` running executions; the copy verifies, restores
and serves again."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, start_server, stop_server

pytestmark = pytest.mark.docker


def navi(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def bodies(data_dir: Path) -> list[str]:
    uri = f"{(data_dir / 'audit.sqlite3').as_uri()}?mode=ro"
    with sqlite3.connect(uri, uri=True) as conn:
        return [r[0] for r in conn.execute("SELECT body FROM audit ORDER BY seq")]


def test_backup_while_executions_run_then_restore_and_serve(tmp_path: Path) -> None:
    live_root = tmp_path / "live"
    live_root.mkdir()
    server = start_server(live_root)
    done: list[int] = []
    errors: list[str] = []
    stop = threading.Event()
    try:
        tenant, token = server.tenant_with_user("acme")
        with server.client(token) as client:
            session = client.post("/v1/sessions").json()["id"]

        def run() -> None:
            with server.client(token) as client:
                while not stop.is_set():
                    resp = client.post(f"/v1/sessions/{session}/exec", json={
                        "tool": "code_exec", "args": {"language": "python", "code": "print(6*7)"}})
                    if resp.status_code != 200 or resp.json()["stdout"] != "42\n":
                        errors.append(resp.text)
                        return
                    done.append(resp.json()["audit_seq"])

        workers = [threading.Thread(target=run, daemon=True) for _ in range(2)]
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + 60
        while len(done) < 4 and not errors and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(done) >= 4, errors
        copy = tmp_path / "backup"
        before = len(done)
        result = navi("backup", str(copy), "--data-dir", str(server.data_dir))
        while len(done) < before + 2 and not errors and time.monotonic() < deadline + 60:
            time.sleep(0.05)  # executions went on during and after the backup
        stop.set()
        for worker in workers:
            worker.join(60)
        assert not errors, errors
        assert result.returncode == 0, result.stdout + result.stderr
        assert "verified:" in result.stdout and "session disks copied: 1 sessions" in result.stdout

        verify = navi("audit", "verify", "--data-dir", str(copy))
        assert verify.returncode == 0, verify.stdout + verify.stderr
        copied, live = bodies(copy), bodies(server.data_dir)
        assert copied == live[:len(copied)] and len(live) > len(copied)  # a prefix
        assert (copy / "audit.jsonl").read_text().splitlines() == copied

        refused = navi("restore", str(copy), "--data-dir", str(server.data_dir), "--force")
        assert refused.returncode == 2 and "in use" in refused.stderr
        assert bodies(server.data_dir)[:len(live)] == live
    finally:
        stop.set()
        stop_server(server)

    # the copy restores into an empty dir and serves: same tenant, token, session, chain
    new_root = tmp_path / "restored"
    new_root.mkdir()
    restored = navi("restore", str(copy), "--data-dir", str(new_root / "data"))
    assert restored.returncode == 0, restored.stdout + restored.stderr
    server2 = start_server(new_root)
    try:
        with server2.client(token) as client:
            assert session in [s["id"] for s in client.get("/v1/sessions").json()]
            # its disk came back with it (tests/e2e/test_backup_disks.py checks the files)
            listed = client.get(f"/v1/sessions/{session}/files")
            assert listed.status_code == 200, listed.text
            assert client.delete(f"/v1/sessions/{session}").status_code in (200, 204)
            other = client.post("/v1/sessions").json()["id"]
            ran = client.post(f"/v1/sessions/{other}/exec", json={
                "tool": "code_exec", "args": {"language": "python", "code": "print(1)"}})
            assert ran.status_code == 200 and ran.json()["audit_seq"] > len(copied)
        auditor = server2.token_for(tenant, "auditor")
        with server2.client(auditor) as client:  # the tenant's own records
            report = client.get("/v1/audit/verify").json()
            own = client.get("/v1/audit", params={"limit": 10000}).json()
            assert report == {"ok": True, "records": len(own), "first_bad_seq": None}
        with server2.client(server2.admin_token) as client:  # the whole log
            report = client.get("/v1/audit/verify").json()
            assert report["ok"] is True and report["records"] > len(copied)
    finally:
        stop_server(server2)
    assert navi("audit", "verify", "--data-dir", str(new_root / "data")).returncode == 0
