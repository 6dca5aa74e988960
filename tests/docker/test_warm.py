"""Warm containers (``warm_pool.py``): single-use, same results as cold, always removed."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import docker
import pytest

from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.spec import LABEL_LEASE
from runtime.sandbox.docker.warm_pool import WarmPoolConfig
from runtime.sandbox.models import Limits, OutputChunk
from tests.docker.sandbox_fixtures import RunFn, py, sweep
from tests.docker.warm_fixtures import gone, wait_ready

pytestmark = pytest.mark.docker


@pytest.fixture
def backend_config(backend_config: DockerBackendConfig) -> DockerBackendConfig:
    return backend_config.model_copy(update={"warm": WarmPoolConfig(size=1, idle_s=30)})


def session_containers(api: docker.APIClient, session: str) -> list[dict]:
    return api.containers(all=True, filters={"label": f"navi.session={session}"})


def ready_ids(backend: DockerBackend) -> list[str]:
    return [c.id for queue in backend.warm._ready.values() for c in queue]


async def test_a_warm_container_serves_exactly_one_call(
    backend: DockerBackend, run: RunFn, workspace: Path, docker_api: docker.APIClient
) -> None:
    session = workspace.name
    code = (
        "import os, json, socket\n"
        "seen = os.path.exists('/tmp/marker')\n"
        "open('/tmp/marker', 'w').write('x')\n"
        "print(json.dumps([seen, socket.gethostname(), os.getpid()]))"
    )
    await run(py(code))  # cold; the pool then launches one for this class
    containers = []
    for _ in range(3):
        await wait_ready(backend, session)
        containers.append(ready_ids(backend)[0])
        taken = backend.warm.stats["taken"]
        result = await run(py(code))
        assert backend.warm.stats["taken"] == taken + 1, "the call did not run warm"
        seen, _, _ = json.loads(result.stdout)
        assert seen is False, "a file from an earlier call was visible"
        assert await gone(docker_api, containers[-1]), "a used warm container was not removed"
    assert len(set(containers)) == 3


async def test_warm_results_are_classified_like_cold(
    backend: DockerBackend, run: RunFn, workspace: Path
) -> None:
    limits = Limits(timeout_s=2, memory_mb=64)
    cases = [
        (py("import sys; print(sys.stdin.read().upper()); sys.exit(3)"), b"hello"),
        (["sleep", "30"], b""),
        (py("b = bytearray(512 * 1024 * 1024)"), b""),
        (["/no/such/program"], b""),
    ]
    results = []
    for argv, stdin in cases:
        await run(["true"], limits=limits)
        await wait_ready(backend, workspace.name)
        taken = backend.warm.stats["taken"]
        chunks: list[OutputChunk] = []

        async def collect(chunk: OutputChunk, chunks: list[OutputChunk] = chunks) -> None:
            chunks.append(chunk)

        results.append(await run(argv, stdin=stdin, limits=limits, on_output=collect))
        assert backend.warm.stats["taken"] == taken + 1
        if argv[0] == "python3" and stdin:
            assert b"".join(c.data for c in chunks if c.stream == "stdout") == b"HELLO\n"
    exited, slept, hog, missing = results
    assert (exited.exit_code, exited.stdout, exited.timed_out) == (3, b"HELLO\n", False)
    assert slept.timed_out and not slept.ok and slept.duration_ms < 5000
    assert hog.oom_killed and not hog.ok
    assert missing.exit_code == 127 and b"/no/such/program" in missing.stderr
    assert all(r.image_digest and r.image_digest.startswith("sha256:") for r in results)


async def test_warm_output_streams_while_the_job_runs(
    backend: DockerBackend, run: RunFn, workspace: Path
) -> None:
    await run(["true"])
    await wait_ready(backend, workspace.name)
    taken = backend.warm.stats["taken"]
    arrived: list[tuple[float, bytes]] = []

    async def collect(chunk: OutputChunk) -> None:
        arrived.append((time.monotonic(), chunk.data))

    code = "import time\nprint('first', flush=True)\ntime.sleep(1.5)\nprint('second')"
    result = await run(py(code), on_output=collect)
    ended = time.monotonic()
    assert backend.warm.stats["taken"] == taken + 1, "the call did not run warm"
    assert result.stdout == b"first\nsecond\n"
    first_at = next(t for t, data in arrived if b"first" in data)
    assert ended - first_at > 1.0, "output came only at the end"


async def test_a_jobs_background_processes_end_with_its_call(
    backend: DockerBackend, run: RunFn, workspace: Path, docker_api: docker.APIClient
) -> None:
    """The call ends when the job exits (its trailers), while the runner waits to be removed
    (``warm_runner``: lingering): what the job left running must end with the container,
    never write into the workspace after its call."""
    await run(["true"])
    await wait_ready(backend, workspace.name)
    container = ready_ids(backend)[0]
    taken = backend.warm.stats["taken"]
    job = "(sleep 1; echo late > /workspace/late.txt) & echo started"
    result = await run(["sh", "-c", job])
    assert backend.warm.stats["taken"] == taken + 1, "the call did not run warm"
    assert (result.exit_code, result.stdout) == (0, b"started\n")
    assert result.duration_ms < 1000, "the call waited for the job's background process"
    assert await gone(docker_api, container), "the used warm container was not removed"
    await asyncio.sleep(1.5)
    assert not (workspace / "late.txt").exists(), "a process outlived its call"


async def test_release_session_and_close_remove_warm_containers(
    backend: DockerBackend, run: RunFn, workspace: Path, docker_api: docker.APIClient
) -> None:
    session = workspace.name
    await run(["true"])
    await wait_ready(backend, session)
    assert len(session_containers(docker_api, session)) == 1
    await backend.release_session(session)
    assert session_containers(docker_api, session) == []
    await run(["true"])  # the session is used again: a new one is launched, close removes it
    await backend.close()
    assert session_containers(docker_api, session) == []


async def test_idle_warm_containers_expire(
    backend_config: DockerBackendConfig, sandbox_image: str, docker_api: docker.APIClient,
    test_instance_id: str,
) -> None:
    config = backend_config.model_copy(update={"warm": WarmPoolConfig(size=1, idle_s=0.5)})
    backend = DockerBackend(config)
    session = f"idle-{uuid.uuid4().hex[:8]}"
    from runtime.sandbox.models import ExecRequest

    try:
        await backend.run(ExecRequest(image=sandbox_image, argv=["true"], exec_id="i1",
                                      session=session))
        await wait_ready(backend, session)
        deadline = time.monotonic() + 10
        while session_containers(docker_api, session) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert session_containers(docker_api, session) == []
        assert backend.warm.stats["expired"] == 1
    finally:
        await backend.close()
        sweep(docker_api, test_instance_id)


async def test_tenant_cap_zero_means_cold(
    backend_config: DockerBackendConfig, sandbox_image: str, docker_api: docker.APIClient,
    test_instance_id: str,
) -> None:
    config = backend_config.model_copy(update={"warm": WarmPoolConfig(size=2, per_tenant=0)})
    backend = DockerBackend(config)
    from runtime.sandbox.models import ExecRequest

    try:
        for i in range(2):
            await backend.run(ExecRequest(image=sandbox_image, argv=["true"], exec_id=f"c{i}",
                                          session="capped"))
        await asyncio.sleep(0.3)
        assert backend.warm.stats["launched"] == 0 and backend.warm.stats["taken"] == 0
        assert session_containers(docker_api, "capped") == []
    finally:
        await backend.close()
        sweep(docker_api, test_instance_id)


KILLED_SUPERVISOR = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
    from runtime.sandbox.models import ExecRequest
    from runtime.sandbox.docker.warm_pool import WarmPoolConfig

    async def main():
        data, image, instance = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
        backend = DockerBackend(DockerBackendConfig(
            data_dir=data, workspaces_root=data / "workspaces", instance_id=instance,
            harden_workspaces_root=False, warm=WarmPoolConfig(size=1, idle_s=60)))
        await backend.run(ExecRequest(image=image, argv=["true"], exec_id="k1",
                                      session="doomed"))
        while backend.warm.ready_count("doomed") < 1:
            await asyncio.sleep(0.02)
        print("ready", flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


async def test_warm_containers_are_reaped_after_a_supervisor_kill_9(
    backend: DockerBackend, sandbox_image: str, tmp_path: Path, docker_api: docker.APIClient,
    test_instance_id: str,
) -> None:
    """The supervisor dies with a warm container ready: its lease label bounds it, and the
    next supervisor's start-up reconcile (same instance) removes it."""
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_SUPERVISOR, str(tmp_path), sandbox_image,
         test_instance_id],
        stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parents[2],
    )
    assert child.stdout is not None

    def until_ready() -> None:
        assert child.stdout is not None
        while (line := child.stdout.readline()) and line.strip() != b"ready":
            pass
        assert line, "the supervisor exited before its warm container was ready"

    try:
        await asyncio.wait_for(asyncio.to_thread(until_ready), 60)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
    left = session_containers(docker_api, "doomed")
    assert len(left) == 1, "the warm container should outlive a SIGKILLed supervisor"
    lease = int(left[0]["Labels"][LABEL_LEASE])
    assert time.time() < lease <= time.time() + 10 + 60 + 30 + 30 + 5  # ready+idle+call+grace
    reaper = backend.reaper()
    assert await reaper.reap_expired(now=time.time()) == []  # within its lease: kept
    assert await reaper.reap_expired(now=lease + 1) == [left[0]["Id"]]
    assert session_containers(docker_api, "doomed") == []


SAME_AS_COLD = {
    "exit": ["sh", "-c", "echo out; echo err >&2; exit 4"],
    "signal": ["sh", "-c", "echo before; kill -9 $$"],
    "straggler": ["sh", "-c", "(sleep 0.3; echo late) & echo early"],
    "forged_end": py("import sys; sys.stdout.buffer.write(b'\\x00navi-end-0123:7\\nafter\\n')"),
    "signals_ignored": ["sh", "-c", "grep -E '^Sig(Ign|Blk)' /proc/self/status"],
    "truncated": py("import sys; sys.stdout.write('x' * 3_000_000); print('tail')"),
    "stdin": ["sh", "-c", "wc -c"],
    "py_inproc": ["python3", "-I", "-c", "import sys, os; print(sys.argv, sys.flags.isolated, "
                  "sys.stdin.read(), __name__, os.getcwd(), sys.path[0]); sys.exit(2)", "a"],
    "py_traceback": ["python3", "-I", "-c", "import sys\nprint('x')\n1/0"],
    "py_syntax": ["python3", "-I", "-c", "print("],
    # the runner's own imports stay out of the job's interpreter (json alone costs ≈ 7 ms of
    # CPU per container), and the frame carries any argv as it was
    "py_modules": ["python3", "-I", "-c", "import sys; print(sorted(m for m in ('json', 're', "
                   "'enum', 'signal') if m in sys.modules), ascii(sys.argv))", "é", "", "a b\n"],
    # the runner skips freeing the interpreter after a python job (_exit), but does what a
    # program can see of the interpreter's exit, in its order
    "py_exit_steps": ["python3", "-I", "-c", textwrap.dedent("""\
        import atexit, sys, threading, time
        class Noisy:
            def __del__(self):
                print('del', flush=True)
        noisy = Noisy()
        unclosed = open('/workspace/unclosed.txt', 'w')
        unclosed.write('kept')
        atexit.register(lambda: print('atexit', open('/workspace/unclosed.txt').read() or '-'))
        threading.Thread(target=lambda: (time.sleep(0.3), print('thread'))).start()
        sys.exit(2**40 + 3)
        """)],
    "py_exit_none": py("import sys; print('x'); sys.exit(None)"),
    "py_keyboard": py("raise KeyboardInterrupt"),
    "argv_fields": ["sh", "-c", 'printf "[%s]" "$@"', "x", "é ü", "", "\u2028"],
    "py_exit_text": ["python3", "-I", "-c", "import atexit; atexit.register(print, 'bye'); "
                     "raise SystemExit('gone')"],
}


@pytest.mark.parametrize("case", sorted(SAME_AS_COLD))
async def test_a_warm_call_returns_what_a_cold_one_does(
    backend: DockerBackend, run: RunFn, workspace: Path, case: str
) -> None:
    """The runner ends the call at its trailers, not at the container's exit: the result must
    not tell the two apart (exit code, signals, output order and caps, a forged trailer)."""
    argv = SAME_AS_COLD[case]
    limits = Limits(timeout_s=20, output_bytes=1024 * 1024)
    cold = await run(argv, stdin=b"12345", limits=limits)
    await wait_ready(backend, workspace.name)
    taken = backend.warm.stats["taken"]
    warm = await run(argv, stdin=b"12345", limits=limits)
    assert backend.warm.stats["taken"] == taken + 1
    fields = ("exit_code", "stdout", "stderr", "timed_out", "oom_killed", "truncated",
              "stdout_size", "stderr_size")
    assert {f: getattr(warm, f) for f in fields} == {f: getattr(cold, f) for f in fields}
    assert len(warm.artifacts) == len(cold.artifacts)


async def test_concurrent_calls_never_share_a_container(
    backend: DockerBackend, run: RunFn, workspace: Path
) -> None:
    """Many calls at once in one session (pool of 1): some warm, some waiting for the one
    being launched, some cold; each still in a container of its own."""
    argv = ["sh", "-c", "grep -o 'upperdir=[^,]*' /proc/self/mountinfo"]  # rootfs: per container
    await run(argv)
    await wait_ready(backend, workspace.name)
    for _ in range(2):
        results = await asyncio.gather(*(run(argv) for _ in range(5)))
        ids = [r.stdout.strip() for r in results]
        assert all(r.exit_code == 0 and r.stdout for r in results)
        assert len(set(ids)) == len(ids), ids
    assert backend.warm.stats["taken"] + backend.warm.stats["waited"] >= 2
