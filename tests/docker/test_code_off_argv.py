"""Tenant code never rides on a container's command line (issue 39): a cold `code_exec`
(python, bash), a `terminal` call with a cwd and a background process (E2B's commands are
ones) each carry a secret marker in their code; while each runs, neither the engine's
container config (`docker inspect`) nor any host process's `/proc/<pid>/cmdline`
(world-readable) holds it. What the tools show stays as before: output, exit codes, `$0`,
tracebacks (cold and warm), a process's own stdin, a signal to it."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.warm_pool import WarmPoolConfig
from runtime.sandbox.stdin_program import BASH, python_program, shell_program
from tests.docker.sandbox_fixtures import RunFn
from tests.docker.test_processes_api import (
    POLICY,
    ended,
    output,
    session_of,
    start,
    wait_for,
)
from tests.docker.warm_fixtures import wait_ready
from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("off-argv"), policy=POLICY, ready_s=120,
                       extra_env={"NAVI_WARM_POOL_SIZE": "0"})  # every call cold
    yield srv
    stop_server(srv)


def host_cmdlines_with(marker: bytes) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                line = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in line:
                found.append(f"{proc.name}: {line[:200]!r}")
    return found


def container_configs(api: docker.APIClient, session: str) -> list[str]:
    return [json.dumps(api.inspect_container(c["Id"]))
            for c in api.containers(filters={"label": f"navi.session={session}"})]


def assert_hidden(api: docker.APIClient, session: str, marker: str) -> None:
    configs = container_configs(api, session)
    assert configs, "no running container of the session"
    assert not [c for c in configs if marker in c], "the code is in the container config"
    assert host_cmdlines_with(marker.encode()) == [], "the code is on a host command line"


def test_cold_calls_keep_their_code_off_argv(server: Server,
                                             docker_api: docker.APIClient) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as client:
        session = session_of(client)
        assert client.put(f"/v1/sessions/{session}/files/sub/keep",
                          content=b"").status_code in (200, 201)
        calls = {
            "py": ("code_exec", {"language": "python", "code": (
                "import os, sys, time\n# {m}\nopen('/workspace/up-py', 'w').close()\n"
                "while not os.path.exists('/workspace/go-py'): time.sleep(0.05)\n"
                "print(sys.argv, sys.stdin.read() == '')\nsys.exit(3)\n")}),
            "sh": ("code_exec", {"language": "bash", "code": (
                ": {m}; touch /workspace/up-sh\n"
                "until [ -e /workspace/go-sh ]; do sleep 0.05; done; echo \"$0 $#\"; exit 4")}),
            "term": ("terminal", {"cwd": "sub", "command": (
                ": {m}; touch /workspace/up-term; "
                "until [ -e /workspace/go-term ]; do sleep 0.05; done; pwd; cat; exit 5")}),
        }
        for name, (tool, args) in calls.items():
            marker = f"navi-secret-{secrets.token_hex(8)}"
            body = {"tool": tool, "args": {k: v.replace("{m}", marker) if k in ("code",
                    "command") else v for k, v in args.items()}}
            answer: dict[str, Any] = {}

            def call(body: dict[str, Any] = body, answer: dict[str, Any] = answer) -> None:
                with server.client(token) as own:
                    answer["r"] = own.post(f"/v1/sessions/{session}/exec", json=body)

            caller = threading.Thread(target=call)
            caller.start()
            wait_for(lambda n=name: client.get(f"/v1/sessions/{session}/files/up-{n}"
                                                 ).status_code == 200, 60, f"{name} to run")
            assert_hidden(docker_api, session, marker)
            client.put(f"/v1/sessions/{session}/files/go-{name}", content=b"")
            caller.join(60)
            resp: httpx.Response = answer["r"]
            assert resp.status_code == 200, resp.text
            got = resp.json()
            assert (name, got["exit_code"], got["stdout"]) == {
                "py": ("py", 3, "['-c'] True\n"), "sh": ("sh", 4, "bash 0\n"),
                "term": ("term", 5, "/workspace/sub\n")}[name]


def test_a_process_keeps_its_command_off_argv_and_its_stdin(
        server: Server, docker_api: docker.APIClient) -> None:
    _, token = server.tenant_with_user()
    marker = f"navi-secret-{secrets.token_hex(8)}"
    with server.client(token) as client:
        session = session_of(client)
        pid = start(client, session, f': {marker}; echo "up $0 $#"; read line; '
                    'echo "got $line"; sleep 300')["id"]
        wait_for(lambda: "up bash 0" in output(client, session, pid)["output"], 60, "up")
        assert_hidden(docker_api, session, marker)
        assert client.post(f"/v1/sessions/{session}/processes/{pid}/input",
                           json={"data": "hello\n"}).status_code == 204
        wait_for(lambda: "got hello" in output(client, session, pid)["output"], 30, "input")
        # bash stays the command's parent: an INT still ends the sleep (130, as before)
        assert client.post(f"/v1/sessions/{session}/processes/{pid}/signal",
                           json={"signal": "INT"}).status_code == 204
        assert ended(client, session, pid)["exit_code"] == 130


@pytest.fixture
def backend_config(backend_config: DockerBackendConfig) -> DockerBackendConfig:
    return backend_config.model_copy(update={"warm": WarmPoolConfig(size=1, idle_s=30)})


STUBBED = {  # what a tool's program shows, cold on argv (before) == cold or warm via stdin
    "py_globals": ("python", "import sys; print([n for n in globals() if 'navi' in n], "
                             "__name__, sys.argv, sys.stdin.read() == '')"),
    "py_traceback": ("python", "def f():\n    1/0\nprint('x')\nf()"),
    "py_syntax": ("python", "print("),
    "py_exit_text": ("python", "import atexit; atexit.register(print, 'bye'); "
                               "raise SystemExit('gone')"),
    "py_future": ("python", "from __future__ import annotations\nx: undefined = 1\n"
                            "print(__annotations__)"),
    "sh": ("bash", 'echo "$0 $# $LINENO"; cat; nope\nexit 3'),
}


async def test_stubs_show_what_the_command_line_did_cold_and_warm(
        backend: DockerBackend, run: RunFn, workspace: Path) -> None:
    fields = ("exit_code", "stdout", "stderr")
    await run(["true"])  # the session's pool fills
    for case, (language, code) in STUBBED.items():
        before = (["python3", "-I", "-c", code] if language == "python"
                  else [*BASH, code])
        argv, frame = python_program(code) if language == "python" else shell_program(code)
        taken = backend.warm.stats["taken"]
        old = await run(before, session=f"old-{case}")  # a session's first call: cold
        cold = await run(argv, stdin=frame, session=f"cold-{case}")
        for other in (f"old-{case}", f"cold-{case}"):  # their warm ones: not over the cap
            await backend.warm.release_session(other)
        await wait_ready(backend, workspace.name)
        warm = await run(argv, stdin=frame)
        assert backend.warm.stats["taken"] == taken + 1
        want = {f: getattr(old, f) for f in fields}
        assert {f: getattr(cold, f) for f in fields} == want, case
        assert {f: getattr(warm, f) for f in fields} == want, case
