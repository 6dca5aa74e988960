"""Fail closed: when the audit store cannot be written, nothing runs.

Two real ways an audit store becomes unwritable: a full disk (a tiny tmpfs, filled up while
the log is open) and a read-only data dir for the (non-root) supervisor user. In both, the
Executor raises ``AuditUnavailable`` and the backend never sees a request.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from runtime.audit import AuditLog, verify_store
from runtime.errors import AuditUnavailable
from runtime.executor import Executor, Invocation
from runtime.policy import Action, PolicyEngine, Subject
from runtime.sandbox.fake import FakeBackend

ROOT = Path(__file__).resolve().parents[2]
PY = Action(tool="code_exec", args={"language": "python", "code": "print(1)"})
RUN = Invocation(argv=["python3", "-c", "print(1)"])
NOBODY = 65534


@pytest.fixture
def tiny_fs():
    mount = Path(tempfile.mkdtemp(prefix="navi-auditfs-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs",
                           str(mount)], capture_output=True)
    if done.returncode != 0:
        os.rmdir(mount)
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
        os.rmdir(mount)


def _fill(path: Path) -> Path:
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


async def test_full_disk_means_nothing_runs(tiny_fs: Path) -> None:
    data = tiny_fs / "data"
    backend = FakeBackend()
    engine = PolicyEngine.from_file(ROOT / "policies" / "default.yaml")
    async with AuditLog(data) as audit:
        ex = Executor(engine=engine, backend=backend, audit=audit, resolve_image=str)
        assert (await ex.execute(Subject(tenant="t"), PY, RUN)).ok
        filler = _fill(tiny_fs)
        for _ in range(3):
            with pytest.raises(AuditUnavailable):
                await ex.execute(Subject(tenant="t"), PY, RUN)
        assert len(backend.requests) == 1  # only the call before the disk filled
        filler.unlink()
        assert (await ex.execute(Subject(tenant="t"), PY, RUN)).ok  # and it recovers
    assert len(backend.requests) == 2
    assert verify_store(data).ok


async def _try_to_run(data: Path, policy: Path) -> dict:
    audit, backend = AuditLog(data), FakeBackend()
    out: dict = {"open": "ok", "exec": "ran"}
    try:
        await audit.open()
    except AuditUnavailable:
        out["open"] = "AuditUnavailable"
    engine = PolicyEngine.from_file(policy)
    ex = Executor(engine=engine, backend=backend, audit=audit, resolve_image=str)
    try:
        await ex.execute(Subject(tenant="t"), PY, RUN)
    except AuditUnavailable:
        out["exec"] = "AuditUnavailable"
    out["requests"] = len(backend.requests)
    await audit.close()
    return out


def _as_nobody(data: Path, policy: Path) -> dict:
    """Run `_try_to_run` in a forked child that dropped to uid/gid 65534 (no exec needed).
    ``policy`` must be a copy nobody can read: the checkout may live under a 0700 dir."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        code = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            result = asyncio.run(_try_to_run(data, policy))
            os.write(write, json.dumps(result).encode())
            code = 0
        except BaseException as exc:  # report, never fall through into the parent's code
            os.write(write, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        raw = fh.read()
    os.waitpid(pid, 0)
    return json.loads(raw)


@pytest.mark.parametrize("what", ["dir", "db", "mirror", "fresh-dir"])
def test_read_only_store_means_nothing_runs(what: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to an unprivileged user")
    base = Path(tempfile.mkdtemp(prefix="navi-audit-ro-"))
    try:
        os.chmod(base, 0o755)
        policy = base / "default.yaml"  # nobody's own readable copy, wherever the checkout is
        shutil.copyfile(ROOT / "policies" / "default.yaml", policy)
        os.chmod(policy, 0o644)
        data = base / "data"
        data.mkdir()
        os.chown(data, NOBODY, NOBODY)
        if what != "fresh-dir":
            assert _as_nobody(data, policy) == {"open": "ok", "exec": "ran", "requests": 1}
        if what in ("dir", "fresh-dir"):
            os.chmod(data, 0o500)
        if what == "db":
            for name in ("audit.sqlite3", "audit.sqlite3-wal", "audit.sqlite3-shm"):
                if (data / name).exists():
                    os.chmod(data / name, 0o400)
        if what == "mirror":
            os.chmod(data / "audit.jsonl", 0o400)
        out = _as_nobody(data, policy)
        assert out == {"open": "AuditUnavailable", "exec": "AuditUnavailable", "requests": 0}
    finally:
        shutil.rmtree(base, ignore_errors=True)
