"""DockerBackend against a real engine: I/O, persistence, classified termination, cleanup."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import docker
import pytest

from runtime.errors import EngineUnavailable, ImageMissing
from runtime.sandbox.backend import stream_run
from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.models import ExecRequest, ExecResult, Limits, OutputChunk
from tests.docker.sandbox_fixtures import RunFn, py

pytestmark = pytest.mark.docker


def ours(api: docker.APIClient, instance_id: str) -> list[dict]:
    return api.containers(all=True, filters={"label": f"navi.instance={instance_id}"})


async def test_stdout_stderr_and_exit_code(run: RunFn) -> None:
    result = await run(py("import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"))
    assert (result.exit_code, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
    assert not result.ok and not result.timed_out and not result.oom_killed
    assert result.image_digest and result.image_digest.startswith("sha256:")
    ok = await run(["true"])
    assert ok.exit_code == 0 and ok.ok and ok.stdout == b"" and ok.stderr == b""


async def test_stdin_is_delivered_then_closed(run: RunFn) -> None:
    data = os.urandom(3 * 1024 * 1024)
    code = "import sys,hashlib; d=sys.stdin.buffer.read(); print(len(d), hashlib.sha256(d).hexdigest())"  # noqa: E501
    result = await run(py(code), stdin=data)
    assert result.stdout.decode().split() == [str(len(data)), hashlib.sha256(data).hexdigest()]


async def test_unread_stdin_does_not_block_the_call(run: RunFn) -> None:
    started = time.monotonic()
    result = await run(["true"], stdin=b"x" * (8 * 1024 * 1024))
    assert result.exit_code == 0
    assert time.monotonic() - started < 10


async def test_binary_and_unicode_output(run: RunFn) -> None:
    code = "import sys; sys.stdout.buffer.write(bytes(range(256))); sys.stderr.write('héllo ✓ 🚀')"
    result = await run(py(code))
    assert result.stdout == bytes(range(256))
    assert result.stderr.decode("utf-8") == "héllo ✓ 🚀"


async def test_output_streams_live(run: RunFn) -> None:
    seen: list[tuple[float, OutputChunk]] = []

    async def on_output(chunk: OutputChunk) -> None:
        seen.append((time.monotonic(), chunk))

    code = "import sys,time; print('first', flush=True); time.sleep(1.5); print('second')"
    result = await run(py(code), on_output=on_output)
    done = time.monotonic()
    assert result.stdout == b"first\nsecond\n"
    assert b"".join(c.data for _, c in seen) == result.stdout
    early = b"".join(c.data for t, c in seen if done - t > 1.0)
    assert early == b"first\n", "the first line did not arrive while the program ran"


async def test_stream_run_yields_chunks_then_result(
    backend: DockerBackend, sandbox_image: str
) -> None:
    request = ExecRequest(
        image=sandbox_image, argv=py("print('a', flush=True); print('b')"), exec_id="stream-1"
    )
    items = [item async for item in stream_run(backend, request)]
    assert isinstance(items[-1], ExecResult) and items[-1].stdout == b"a\nb\n"
    assert all(isinstance(i, OutputChunk) for i in items[:-1])
    assert b"".join(i.data for i in items[:-1] if isinstance(i, OutputChunk)) == b"a\nb\n"


async def test_workspace_persists_but_tmp_does_not(run: RunFn, workspace: Path) -> None:
    first = await run(["sh", "-c", "echo kept > /workspace/f && echo gone > /tmp/g && pwd"])
    assert first.exit_code == 0, first.stderr
    assert first.stdout == b"/workspace\n"
    second = await run(["sh", "-c", "cat f; test -e /tmp/g && echo tmp-leaked || echo tmp-fresh"])
    assert second.stdout == b"kept\ntmp-fresh\n"
    assert (workspace / "f").read_text() == "kept\n"


async def test_timeout_kills_the_process_tree_within_deadline(
    run: RunFn, docker_api: docker.APIClient, test_instance_id: str
) -> None:
    started = time.monotonic()
    result = await run(
        ["sh", "-c", "sleep 100 & sleep 100 & sleep 100; echo never"], limits=Limits(timeout_s=2)
    )
    elapsed = time.monotonic() - started
    assert result.timed_out and not result.ok
    assert b"never" not in result.stdout
    assert elapsed <= 2 + 1, f"took {elapsed:.2f}s for a 2s deadline"
    assert ours(docker_api, test_instance_id) == []


async def test_memory_exhaustion_is_reported_as_oom(run: RunFn) -> None:
    result = await run(
        py("x = bytearray(4 * 1024**3); print('allocated')"), limits=Limits(memory_mb=256)
    )
    assert result.oom_killed and not result.ok
    assert b"allocated" not in result.stdout


async def test_fork_bomb_is_contained_and_host_stays_responsive(
    run: RunFn, docker_api: docker.APIClient, test_instance_id: str
) -> None:
    started = time.monotonic()
    bomb = asyncio.create_task(
        # the top-level shell stays (its `wait` would return at once: the bomb's processes are
        # not its children) so the container lives until the bomb meets the pids limit
        run(["bash", "-c", "f(){ f | f & }; f; sleep 2"], limits=Limits(timeout_s=5, pids=64))
    )
    await asyncio.sleep(2)  # the bomb is going off now
    probe_started = time.monotonic()
    host = await asyncio.to_thread(subprocess.run, ["sh", "-c", "echo alive"], capture_output=True)
    assert host.stdout == b"alive\n" and time.monotonic() - probe_started < 2
    result = await bomb  # it fizzles out against the pids limit, or dies at the deadline
    assert time.monotonic() - started <= 5 + 3  # the deadline, plus the kill under load
    assert b"fork" in result.stderr and b"Resource temporarily unavailable" in result.stderr
    assert ours(docker_api, test_instance_id) == []
    after = await run(["echo", "next call fine"])
    assert after.stdout == b"next call fine\n"


async def test_large_output_keeps_head_and_tail_and_saves_artifact(
    run: RunFn, workspace: Path, backend_config: DockerBackendConfig
) -> None:
    code = (
        "import sys; w=sys.stdout.write; w('HEAD'); "
        "[w(str(i % 10) * 1000) for i in range(50_000)]; w('TAIL')"
    )
    result = await run(py(code), limits=Limits(output_bytes=1024 * 1024))
    total = 4 + 50_000 * 1000 + 4
    assert result.truncated and result.stdout_size == total
    assert result.stdout.startswith(b"HEAD") and result.stdout.endswith(b"TAIL")
    assert b"bytes omitted" in result.stdout and len(result.stdout) < 1024 * 1024 + 200
    (artifact,) = result.artifacts
    path = Path(artifact)
    assert path.parent == backend_config.artifacts_dir / workspace.name
    assert not path.is_relative_to(workspace)
    assert path.stat().st_size == total
    with path.open("rb") as fh:
        assert fh.read(4) == b"HEAD"
        fh.seek(-4, os.SEEK_END)
        assert fh.read() == b"TAIL"


async def test_labels_and_hardening_reach_the_engine(
    run: RunFn, docker_api: docker.APIClient, test_instance_id: str
) -> None:
    call = asyncio.create_task(run(["sleep", "3"], exec_id="label-check", limits=Limits()))
    for _ in range(100):
        found = docker_api.containers(filters={"label": "navi.exec_id=label-check"})
        if found:
            break
        await asyncio.sleep(0.05)
    info = docker_api.inspect_container(found[0]["Id"])
    await call
    labels, host = info["Config"]["Labels"], info["HostConfig"]
    assert labels["navi.instance"] == test_instance_id and labels["navi.tenant"] == "test"
    assert abs(int(labels["navi.lease_until"]) - (time.time() + 30 + 30)) < 10
    assert host["NetworkMode"] == "none" and host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert host["ReadonlyRootfs"] is True and host["Init"] is True
    assert "no-new-privileges:true" in host["SecurityOpt"]
    assert any(opt.startswith("seccomp={") for opt in host["SecurityOpt"])
    assert host["Memory"] == host["MemorySwap"] == 512 * 1024 * 1024
    assert host["PidsLimit"] == 256 and host["NanoCpus"] == 1_000_000_000
    assert host["LogConfig"]["Type"] == "none"
    assert "noexec" in host["Tmpfs"]["/tmp"] and "size=67108864" in host["Tmpfs"]["/tmp"]
    assert {u["Name"]: u["Hard"] for u in host["Ulimits"]}["core"] == 0
    assert info["Config"]["User"] == "65534:65534"
    assert [m["Destination"] for m in info["Mounts"]] == ["/workspace"]


async def test_kill_stops_a_running_call(backend: DockerBackend, run: RunFn) -> None:
    call = asyncio.create_task(run(["sleep", "60"], exec_id="to-kill"))
    for _ in range(100):
        if "to-kill" in backend._running:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    started = time.monotonic()
    await backend.kill("to-kill")
    result = await asyncio.wait_for(call, 10)
    assert not result.ok and not result.timed_out and time.monotonic() - started < 5


async def test_cancelled_call_removes_its_container(
    run: RunFn, docker_api: docker.APIClient, test_instance_id: str
) -> None:
    call = asyncio.create_task(run(["sleep", "60"]))
    for _ in range(100):
        if ours(docker_api, test_instance_id):
            break
        await asyncio.sleep(0.05)
    assert ours(docker_api, test_instance_id), "the call never started"
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert ours(docker_api, test_instance_id) == []


async def test_env_is_only_what_was_asked(
    run: RunFn, sandbox_image: str, docker_api: docker.APIClient
) -> None:
    result = await run(py("import os,json; print(json.dumps(dict(os.environ)))"), env={"A": "1"})
    env = json.loads(result.stdout)
    assert env["A"] == "1" and env["HOME"] == "/tmp" and env["LANG"] == "C.UTF-8"
    image_env = docker_api.inspect_image(sandbox_image)["Config"]["Env"]
    allowed = {"A", "PATH", "HOME", "LANG", "HOSTNAME"} | {e.split("=")[0] for e in image_env or []}
    assert set(env) <= allowed


async def test_missing_image_is_a_sandbox_error(run: RunFn) -> None:
    with pytest.raises(ImageMissing, match="navi images build"):
        await run(["true"], image="navi-test/does-not-exist:0")


async def test_unreachable_engine_is_engine_unavailable(tmp_path: Path) -> None:
    config = DockerBackendConfig(
        data_dir=tmp_path,
        workspaces_root=tmp_path / "ws",
        instance_id="navi-test-noengine",
        base_url=f"unix://{tmp_path}/no-docker.sock",
        harden_workspaces_root=False,
    )
    sandbox = DockerBackend(config)
    with pytest.raises(EngineUnavailable):
        await sandbox.run(ExecRequest(image="x", argv=["true"], exec_id="e1"))
    await sandbox.close()


async def test_close_stops_running_calls_and_removes_their_containers(
    backend: DockerBackend, run: RunFn, docker_api: docker.APIClient, test_instance_id: str
) -> None:
    call = asyncio.create_task(run(["sleep", "60"], exec_id="at-close"))
    for _ in range(100):
        if "at-close" in backend._running:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    await backend.close()
    result = await asyncio.wait_for(call, 10)
    assert not result.ok
    assert ours(docker_api, test_instance_id) == []
