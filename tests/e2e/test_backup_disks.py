"""Backups hold the users' files: `navi backup` against a real `navi serve` copies each
session's disk while calls write to it, and `navi restore` brings the files back byte-exact
on a new server."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_backup import navi

pytestmark = pytest.mark.docker

VERSIONS = 10_000  # the writer's loop bound (it stops on its deadline first)
FILES = 8

# Rewrites FILES files as fast as it can, each by rename (old or new, never half), each
# version a distinct body that carries its own digest; a bigger file rewritten in place by
# one write(2) per version, all one byte, fsync'd: a freeze waits for a write(2) in flight,
# so a copy holds one version of it, and a torn copy shows as mixed bytes.
WRITER = f"""
import hashlib, os, time
end = time.time() + float(os.environ.get("SECONDS_LEFT", "8"))
os.makedirs("churn", exist_ok=True)
for v in range(1, {VERSIONS}):
    for n in range({FILES}):
        body = (f"{{n}}:{{v}}:" + "x" * (1000 + 37 * n)).encode()
        data = hashlib.sha256(body).hexdigest().encode() + b"\\n" + body
        with open(f"churn/.f{{n}}.tmp", "wb") as fh:
            fh.write(data)
        os.replace(f"churn/.f{{n}}.tmp", f"churn/f{{n}}")
    with open("churn/big", "r+b" if v > 1 else "wb") as fh:
        fh.write(bytes([v % 251]) * (256 * 1024))
        fh.flush()
        os.fsync(fh.fileno())
    with open("churn/.version.tmp", "w") as fh:
        fh.write(str(v))
    os.replace("churn/.version.tmp", "churn/version")
    if time.time() > end:
        break
print(v)
"""


def exec_code(client: object, session: str, code: str, timeout_s: int = 60) -> dict[str, object]:
    resp = client.post(f"/v1/sessions/{session}/exec", json={  # type: ignore[attr-defined]
        "tool": "code_exec", "args": {"language": "python", "code": code},
        "timeout_s": timeout_s})
    assert resp.status_code == 200, resp.text
    body: dict[str, object] = resp.json()
    assert body["exit_code"] == 0, body
    return body


def image_file(root: Path, tenant: str, session: str) -> Path:
    return root / "workspaces" / tenant / f"{session}.img"


def debugfs_cat(image: Path, path: str) -> bytes:
    done = subprocess.run(["debugfs", "-R", f"cat {path}", str(image)], capture_output=True,
                          timeout=60, check=True)
    return done.stdout


def fsck_clean(image: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["e2fsck", "-fn", str(image)], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def elsewhere(tmp_path: Path) -> Iterator[Path]:
    """A directory on another filesystem than the data dir's (a backup disk), if the host
    has one (/dev/shm); else beside it."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.stat(shm).st_dev != os.stat(tmp_path).st_dev:
        where = Path(tempfile.mkdtemp(prefix="navi-backup-", dir=shm))
        yield where
        shutil.rmtree(where, ignore_errors=True)
    else:
        yield tmp_path


def test_files_come_back_byte_exact_after_backup_while_serving(tmp_path: Path,
                                                               elsewhere: Path) -> None:
    live_root = tmp_path / "live"
    live_root.mkdir()
    server = start_server(live_root)
    blob = os.urandom(1024 * 1024 + 17)  # binary, not a multiple of any block
    try:
        tenant, token = server.tenant_with_user("lab")
        with server.client(token) as client:
            a, b = (client.post("/v1/sessions").json()["id"] for _ in range(2))
            put = client.put(f"/v1/sessions/{a}/files/data/blob.bin", content=blob)
            assert put.status_code == 201, put.text
            exec_code(client, a, "import os\nos.makedirs('out', exist_ok=True)\n"
                      "open('out/result.txt','w').write('computed ' + str(6*7))")
            exec_code(client, b, "open('notes.md','w').write('# only in b\\n' * 1000)")
            snap = client.post(f"/v1/sessions/{a}/snapshots", json={"name": "v1"})
            assert snap.status_code == 201, snap.text
            put = client.put(f"/v1/sessions/{a}/files/since-v1.txt", content=b"since")
            assert put.status_code == 201, put.text
            client.delete(f"/v1/sessions/{b}/files/missing.txt")
            listed_a = client.get(f"/v1/sessions/{a}/files").json()
            listed_b = client.get(f"/v1/sessions/{b}/files").json()
            copy = elsewhere / "backup"  # onto another filesystem, and back from it
            result = navi("backup", str(copy), "--data-dir", str(server.data_dir), "--json")
            assert result.returncode == 0, result.stdout + result.stderr
            manifest = json.loads(result.stdout)
            # still serving: a file written after the backup is not in it
            put = client.put(f"/v1/sessions/{a}/files/after.txt", content=b"later")
            assert put.status_code == 201, put.text
    finally:
        stop_server(server)

    disks = manifest["disks"]["disks"]
    assert sorted(d["session"] for d in disks if d["kind"] == "session") == sorted([a, b])
    assert [d["session"] for d in disks if d["kind"] == "snapshot"] == [a]
    for disk in disks:
        image = copy / disk["path"]
        st = image.stat()
        assert st.st_size == disk["size"] >= 1024 * 1024 * 1024  # the session's quota
        assert st.st_blocks * 512 < 64 * 1024 * 1024, disk  # sparse: what it holds
        assert fsck_clean(image).returncode == 0, fsck_clean(image).stdout

    new_root = tmp_path / "restored"
    new_root.mkdir()
    restored = navi("restore", str(copy), "--data-dir", str(new_root / "data"))
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert "session disks restored: 2 sessions" in restored.stdout, restored.stdout
    for session in (a, b):
        image = image_file(new_root / "data", tenant, session)
        assert image.stat().st_blocks * 512 < 64 * 1024 * 1024  # still sparse
        check = fsck_clean(image)
        assert check.returncode == 0, check.stdout + check.stderr
    server2 = start_server(new_root)
    try:
        with server2.client(token) as client:
            got = client.get(f"/v1/sessions/{a}/files/data/blob.bin")
            assert got.status_code == 200, got.text
            assert got.content == blob
            assert client.get(f"/v1/sessions/{a}/files/out/result.txt").content \
                == b"computed 42"
            assert client.get(f"/v1/sessions/{a}/files/after.txt").status_code == 404
            assert client.get(f"/v1/sessions/{b}/files/notes.md").content \
                == b"# only in b\n" * 1000
            assert client.get(f"/v1/sessions/{a}/files").json() == listed_a
            assert client.get(f"/v1/sessions/{b}/files").json() == listed_b
            # the session's snapshot came back too, and restores
            (kept,) = client.get(f"/v1/sessions/{a}/snapshots").json()
            assert kept["name"] == "v1" and kept["id"] == snap.json()["id"]
            assert client.get(f"/v1/sessions/{a}/files/since-v1.txt").content == b"since"
            # and the sandbox sees them too, and can go on writing
            ran = exec_code(client, a, "import hashlib\nprint(hashlib.sha256("
                            "open('data/blob.bin','rb').read()).hexdigest())\n"
                            "open('again.txt','w').write('ok')")
            assert ran["stdout"] == hashlib.sha256(blob).hexdigest() + "\n"
            assert client.get(f"/v1/sessions/{a}/files/again.txt").content == b"ok"
            resp = client.post(f"/v1/sessions/{a}/snapshots/{kept['id']}/restore")
            assert resp.status_code == 200, resp.text
            assert client.get(f"/v1/sessions/{a}/files/since-v1.txt").status_code == 404
            assert client.get(f"/v1/sessions/{a}/files/data/blob.bin").content == blob
    finally:
        stop_server(server2)


def check_churn(image: Path) -> int:
    """Each file of the writer's is one whole version; returns the version file's value."""
    for n in range(FILES):
        data = debugfs_cat(image, f"/workspace/churn/f{n}")
        digest, _, body = data.partition(b"\n")
        assert hashlib.sha256(body).hexdigest().encode() == digest, (n, data[:80])
        assert body.startswith(f"{n}:".encode())
    big = debugfs_cat(image, "/workspace/churn/big")
    assert len(big) == 256 * 1024 and big == big[:1] * len(big), "torn big file"
    return int(debugfs_cat(image, "/workspace/churn/version") or b"0")


def test_backup_taken_during_writes_is_consistent(tmp_path: Path) -> None:
    server: Server = start_server(tmp_path)
    try:
        tenant, token = server.tenant_with_user("busy")
        with server.client(token) as client:
            session = client.post("/v1/sessions").json()["id"]
        outcome: list[dict[str, object]] = []

        def write() -> None:
            with server.client(token) as client:
                outcome.append(exec_code(client, session, WRITER, timeout_s=120))

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        deadline = time.monotonic() + 60
        with server.client(token) as client:
            while time.monotonic() < deadline:
                got = client.get(f"/v1/sessions/{session}/files/churn/version")
                if got.status_code == 200 and int(got.content or b"0") >= 3:
                    break
                time.sleep(0.2)
        copies = []
        for n in range(3):  # several copies, each in the middle of the writes
            copies.append(tmp_path / f"backup{n}")
            result = navi("backup", str(copies[-1]), "--data-dir", str(server.data_dir))
            assert result.returncode == 0, result.stdout + result.stderr
        writer.join(120)
        assert outcome, "the writer did not finish"
        last = int(str(outcome[0]["stdout"]).strip())
    finally:
        stop_server(server)
    seen = []
    for copy in copies:
        image = image_file(copy, tenant, session)
        check = fsck_clean(image)
        assert check.returncode == 0, check.stdout + check.stderr
        seen.append(check_churn(image))
    assert 3 <= seen[0] <= seen[-1] <= last, (seen, last)
    assert seen[0] < last, "every copy was taken after the writes ended"


def test_backup_cost_of_sessions(tmp_path: Path) -> None:
    """What a backup of 21 sessions costs (20 holding 1 MiB, one 100 MiB): time and bytes,
    printed (README's numbers); bytes stay near what the sessions hold, not their quotas."""
    live_root = tmp_path / "live"
    live_root.mkdir()
    server = start_server(live_root)
    small, big = os.urandom(1024 * 1024), os.urandom(100 * 1024 * 1024)
    try:
        _, token = server.tenant_with_user("cost")
        with server.client(token) as client:
            sessions = [client.post("/v1/sessions").json()["id"] for _ in range(21)]
            for n, session in enumerate(sessions):
                put = client.put(f"/v1/sessions/{session}/files/data.bin",
                                 content=big if n == 0 else small)
                assert put.status_code == 201, put.text
        copy = tmp_path / "backup"
        started = time.monotonic()
        result = navi("backup", str(copy), "--data-dir", str(server.data_dir), "--json")
        wall = time.monotonic() - started
        assert result.returncode == 0, result.stdout + result.stderr
    finally:
        stop_server(server)
    report = json.loads(result.stdout)["disks"]
    disks = report["disks"]
    stored = sum(d["stored"] for d in disks)
    held = len(big) + 20 * len(small)
    total = sum(f.stat().st_blocks * 512 for f in copy.rglob("*") if f.is_file())
    restored_at = time.monotonic()
    restored = navi("restore", str(copy), "--data-dir", str(tmp_path / "restored"))
    assert restored.returncode == 0, restored.stdout + restored.stderr
    restore_wall = time.monotonic() - restored_at
    print(f"\nbackup of {len(disks)} sessions holding {held / 2**20:.0f} MiB: "
          f"navi backup {wall:.2f} s (disks {report['seconds']:.2f} s, biggest "
          f"{max(d['seconds'] for d in disks):.2f} s), disks {stored / 2**20:.1f} MiB stored, "
          f"backup dir {total / 2**20:.1f} MiB on disk, apparent "
          f"{sum(d['size'] for d in disks) / 2**30:.0f} GiB; navi restore {restore_wall:.2f} s")
    assert len(disks) == 21
    assert stored < held + 21 * 8 * 2**20  # what they hold plus each filesystem's metadata


def test_idle_sessions_are_copied_unmounted(tmp_path: Path) -> None:
    """A session whose disk was released (idle) is copied as its image lies, and a call after
    the backup mounts it again as usual."""
    live_root = tmp_path / "live"
    live_root.mkdir()
    server = start_server(live_root, extra_env={"NAVI_SESSION_IDLE_S": "1"})
    try:
        tenant, token = server.tenant_with_user("idle")
        with server.client(token) as client:
            session = client.post("/v1/sessions").json()["id"]
            assert client.put(f"/v1/sessions/{session}/files/a.txt",
                              content=b"at rest").status_code == 201
            point = f" {server.data_dir / 'workspaces' / tenant / session} "
            deadline = time.monotonic() + 60
            while point in Path("/proc/self/mounts").read_text():
                assert time.monotonic() < deadline, "the session's disk was never released"
                time.sleep(0.2)
            assert client.get(f"/v1/sessions/{session}").json()["state"] == "idle"
            copy = tmp_path / "backup"
            result = navi("backup", str(copy), "--data-dir", str(server.data_dir))
            assert result.returncode == 0, result.stdout + result.stderr
            assert "session disks copied: 1 sessions" in result.stdout, result.stdout
            assert client.get(f"/v1/sessions/{session}/files/a.txt").content == b"at rest"
    finally:
        stop_server(server)
    assert fsck_clean(image_file(copy, tenant, session)).returncode == 0
    assert debugfs_cat(image_file(copy, tenant, session), "/workspace/a.txt") == b"at rest"
