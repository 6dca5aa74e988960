"""`navi backup` / `navi restore` on a real store and a real audit log that keep being written."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
import threading
import time
from pathlib import Path

from typer.testing import CliRunner

from runtime.audit import AuditEntry, AuditLog
from runtime.cli import app
from runtime.store import Store

runner = CliRunner()
PAD = "x" * 16384  # bigger records: the copy takes long enough for appends to overlap it


class Writer(threading.Thread):
    """Appends audit records (small checkpoint interval) and creates sessions until stopped,
    on its own event loop: another writer of the same data dir, like a running server."""

    def __init__(self, data_dir: Path, tenant_id: str) -> None:
        super().__init__(daemon=True)
        self.data_dir, self.tenant_id = data_dir, tenant_id
        self.stop = threading.Event()
        self.started_writing = threading.Event()
        self.appended = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by the test
            self.error = exc

    async def _main(self) -> None:
        store = await Store.open(self.data_dir / "navi.sqlite3")
        try:
            async with AuditLog(self.data_dir, instance="writer-1", checkpoint_every=7) as log:
                while not self.stop.is_set():
                    session = await store.create_session(self.tenant_id, "developer")
                    await log.append(AuditEntry(kind="denied", tenant=self.tenant_id,
                                                session=session.id, tool="code_exec",
                                                rule="test", limits={"pad": PAD}))
                    self.appended += 1
                    if self.appended >= 20:
                        self.started_writing.set()
        finally:
            await store.close()


async def _seed(data_dir: Path) -> list[str]:
    store = await Store.open(data_dir / "navi.sqlite3")
    try:
        tenants = [await store.create_tenant(n) for n in ("acme", "globex")]
        await store.ensure_bootstrap_admin("bootstrap-admin-token-1234")
    finally:
        await store.close()
    async with AuditLog(data_dir, instance="seed") as log:
        for i in range(30):
            await log.append(AuditEntry(kind="denied", tenant=tenants[0].id, tool=f"t{i}",
                                        rule="seed", limits={"pad": PAD}))
    tools = data_dir / "tools" / tenants[0].id
    tools.mkdir(parents=True, mode=0o700)
    (tools / "hello.py").write_text("name = 'hello'\n")
    os.chmod(tools / "hello.py", 0o644)
    (tools / ".hello.py.tmp-0a1b2c").write_text("half")
    (data_dir / "admin-token").write_text("bootstrap-admin-token-1234\n")
    os.chmod(data_dir / "admin-token", 0o600)
    return [t.id for t in tenants]


def _bodies(data_dir: Path) -> list[str]:
    with sqlite3.connect(f"{(data_dir / 'audit.sqlite3').as_uri()}?mode=ro", uri=True) as conn:
        return [r[0] for r in conn.execute("SELECT body FROM audit ORDER BY seq")]


def _head(data_dir: Path) -> int:
    with sqlite3.connect(f"{(data_dir / 'audit.sqlite3').as_uri()}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM audit").fetchone()[0])


def _verify(directory: Path) -> str:
    result = runner.invoke(app, ["audit", "verify", "--data-dir", str(directory)])
    assert result.exit_code == 0, result.output
    return result.output


def _backup_while_writing(tmp_path: Path) -> tuple[Path, Path, list[str], dict, int, int]:
    data = tmp_path / "data"
    tenants = asyncio.run(_seed(data))
    writer = Writer(data, tenants[1])
    writer.start()
    try:
        assert writer.started_writing.wait(60), writer.error
        before = _head(data)
        copy = tmp_path / "backups" / "b1"
        result = runner.invoke(app, ["backup", str(copy), "--data-dir", str(data), "--json"])
        after = _head(data)
        time.sleep(0.05)  # a few more appends after the copy
    finally:
        writer.stop.set()
        writer.join(60)
    assert writer.error is None, writer.error
    assert result.exit_code == 0, result.output
    manifest = next(json.loads(line) for line in result.output.splitlines()
                    if line.startswith('{"format"'))  # the writer's log lines interleave
    return data, copy, tenants, manifest, before, after


def test_backup_while_appending_verifies_and_holds_a_prefix(tmp_path: Path) -> None:
    data, copy, _, manifest, before, after = _backup_while_writing(tmp_path)
    assert after > before, "the writer must have appended while the backup ran"
    out = _verify(copy)
    copied = _bodies(copy)
    live = _bodies(data)
    head = manifest["audit"]["head_seq"]
    assert f"ok: {head} records verified" in out
    assert before <= head <= after and len(copied) == head
    assert copied == live[:head] and len(live) > head  # a prefix of the live chain
    mirror = (copy / "audit.jsonl").read_text().splitlines()
    assert mirror == copied  # cut to exactly the copied records
    cp = json.loads((copy / "audit.checkpoint.json").read_text())
    assert cp["seq"] <= head and manifest["audit"]["checkpoint_seq"] == cp["seq"]
    assert manifest["verified"]["ok"] is True
    # single-file databases: no -wal beside them; the store copy is readable as it stands
    assert not any(p.name.endswith(("-wal", "-shm")) for p in copy.iterdir())
    assert manifest["store"]["tenants"] == 3 and manifest["store"]["sessions"] >= 20


def test_backup_is_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        _, copy, _, manifest, _, _ = _backup_while_writing(tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(copy.stat().st_mode) == 0o700
    assert stat.S_IMODE((copy / "keys").stat().st_mode) == 0o700
    keys = sorted(p.name for p in (copy / "keys").iterdir())
    assert keys == ["audit-ed25519.pem", "audit-ed25519.pub"]
    for path in [*(copy / "keys").iterdir(), copy / "admin-token", copy / "navi.sqlite3",
                 copy / "audit.sqlite3", copy / "audit.jsonl", copy / "backup.json"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert {f["path"] for f in manifest["files"]} >= {
        "navi.sqlite3", "audit.sqlite3", "audit.jsonl", "audit.checkpoint.json",
        "keys/audit-ed25519.pem", "admin-token"}
    assert not list(copy.parent.glob(".b1.partial-*"))


def test_restore_into_empty_dir(tmp_path: Path) -> None:
    _, copy, tenants, manifest, _, _ = _backup_while_writing(tmp_path)
    target = tmp_path / "restored"
    result = runner.invoke(app, ["restore", str(copy), "--data-dir", str(target)])
    assert result.exit_code == 0, result.output
    assert "verified:" in result.output
    _verify(target)
    assert _bodies(target) == _bodies(copy)
    assert stat.S_IMODE((target / "keys" / "audit-ed25519.pem").stat().st_mode) == 0o600
    assert stat.S_IMODE((target / "keys").stat().st_mode) == 0o700
    tool = target / "tools" / tenants[0] / "hello.py"  # agent-written tools come back as made
    assert tool.read_text() == "name = 'hello'\n" and stat.S_IMODE(tool.stat().st_mode) == 0o644
    assert sorted(p.name for p in tool.parent.iterdir()) == ["hello.py"]  # no half write

    async def reopen() -> None:
        store = await Store.open(target / "navi.sqlite3")
        try:
            assert sorted(t.id for t in await store.list_tenants()) == sorted(
                [*tenants, (await store.get_tenant_by_name("admin")).id])  # type: ignore[union-attr]
            sessions = await store.list_sessions(tenants[1])
            assert len(sessions) == manifest["store"]["sessions"]
            assert await store.authenticate("bootstrap-admin-token-1234") is not None
        finally:
            await store.close()
        # the restored chain goes on: the same key signs, verify still passes
        async with AuditLog(target, instance="after-restore") as log:
            record = await log.append(AuditEntry(kind="denied", tenant=tenants[0], rule="x"))
            assert record.seq == manifest["audit"]["head_seq"] + 1

    asyncio.run(reopen())
    _verify(target)


def test_restore_refused_into_a_live_data_dir(tmp_path: Path) -> None:
    _, copy, tenants, _, _, _ = _backup_while_writing(tmp_path)
    target = tmp_path / "live"
    target.mkdir()
    (target / "instance_id").write_text("navi-0123456789abcdef\n")
    holding = threading.Event()
    release = threading.Event()

    async def hold(instance: str) -> None:
        async with AuditLog(target, instance=instance) as log:
            await log.append(AuditEntry(kind="denied", tenant="t", rule="live"))
            holding.set()
            await asyncio.to_thread(release.wait, 30)

    for instance in ("navi-0123456789abcdef", "p-exec-cli"):  # the server, a `navi exec`
        holding.clear()
        release.clear()
        thread = threading.Thread(target=asyncio.run, args=(hold(instance),), daemon=True)
        thread.start()
        assert holding.wait(30)
        try:
            before = _bodies(target)
            for extra in ([], ["--force"]):
                result = runner.invoke(app, ["restore", str(copy), "--data-dir", str(target),
                                             *extra])
                assert result.exit_code == 2, result.output
                assert "in use" in result.output and instance in result.output
            assert _bodies(target) == before  # nothing replaced
        finally:
            release.set()
            thread.join(30)

    # stopped now, but it holds state: only --force replaces it, moving the old aside
    result = runner.invoke(app, ["restore", str(copy), "--data-dir", str(target)])
    assert result.exit_code == 2 and "already holds state" in result.output
    old = _bodies(target)
    result = runner.invoke(app, ["restore", str(copy), "--data-dir", str(target), "--force"])
    assert result.exit_code == 0, result.output
    _verify(target)
    assert _bodies(target) == _bodies(copy)
    aside = next(target.glob("pre-restore-*"))
    assert _bodies(aside) == old
    assert (target / "instance_id").read_text().strip() == "navi-0123456789abcdef"


def test_backup_refuses_a_used_dir_and_reports_a_damaged_chain(tmp_path: Path) -> None:
    data = tmp_path / "data"
    asyncio.run(_seed(data))
    used = tmp_path / "used"
    used.mkdir()
    (used / "something").write_text("x")
    result = runner.invoke(app, ["backup", str(used), "--data-dir", str(data)])
    assert result.exit_code == 2 and "not an empty directory" in result.output
    assert runner.invoke(app, ["backup", str(tmp_path / "b"), "--data-dir",
                               str(tmp_path / "nothing")]).exit_code == 2
    with sqlite3.connect(data / "audit.sqlite3") as conn:
        body = conn.execute("SELECT body FROM audit WHERE seq = 4").fetchone()[0]
        conn.execute("UPDATE audit SET body = ? WHERE seq = 4", (body.replace("t3", "t9"),))
    result = runner.invoke(app, ["backup", str(tmp_path / "b"), "--data-dir", str(data)])
    assert result.exit_code == 1 and "first bad record 4" in result.output
    # kept as evidence, but not restored without --force
    result = runner.invoke(app, ["restore", str(tmp_path / "b"), "--data-dir",
                                 str(tmp_path / "r")])
    assert result.exit_code == 2 and "does not verify" in result.output
    # a file changed after the backup is caught by the manifest
    good = tmp_path / "good"
    with sqlite3.connect(data / "audit.sqlite3") as conn:
        conn.execute("UPDATE audit SET body = ? WHERE seq = 4", (body,))
    assert runner.invoke(app, ["backup", str(good), "--data-dir", str(data)]).exit_code == 0
    with (good / "keys" / "audit-ed25519.pub").open("ab") as fh:
        fh.write(b"\n")
    result = runner.invoke(app, ["restore", str(good), "--data-dir", str(tmp_path / "r2")])
    assert result.exit_code == 2 and "differs from the manifest" in result.output


def test_a_lagging_mirror_is_copied_as_it_lags(tmp_path: Path) -> None:
    """A crash between commit and mirror write leaves the mirror short (the next append
    back-fills it): the copy keeps every database record, the mirror as far as it goes."""
    data = tmp_path / "data"
    asyncio.run(_seed(data))
    lines = (data / "audit.jsonl").read_bytes().splitlines(keepends=True)
    (data / "audit.jsonl").write_bytes(b"".join(lines[:-3]) + lines[-3][:40])  # torn tail
    copy = tmp_path / "copy"
    result = runner.invoke(app, ["backup", str(copy), "--data-dir", str(data), "--json"])
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.output.splitlines()[-1])
    assert manifest["audit"]["records"] == 30 and manifest["audit"]["mirror_lines"] == 27
    assert manifest["audit"]["mirror_waited"] is True
    assert (copy / "audit.jsonl").read_bytes() == b"".join(lines[:27])
    assert "ok: 30 records verified" in _verify(copy)
