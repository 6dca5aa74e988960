"""Commands and the code interpreter through the real E2B SDKs (`e2b` 2.63 and
`e2b-code-interpreter` 2.11, sync) against a real `navi serve` and the real Docker engine.

Every command the SDK starts is a Navi process (a container of its own): foreground and
background runs, streamed callbacks, stdin, kill, list, reconnect; run_code keeps state in a
Navi kernel, returns a PNG and a DataFrame's HTML, and contexts are kernels apart. A tenant
whose profile denies execution gets the SDK's error naming the rule; every command and
execute is in the audit with the sandbox's id as its session."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2b import CommandExitException, Sandbox, SandboxException
from e2b_code_interpreter import AsyncSandbox as AsyncCodeSandbox
from e2b_code_interpreter import Sandbox as CodeSandbox

from tests.e2e.conftest import Server, stop_server
from tests.e2e.e2b_server import audit, e2b_vars, start_e2b_server

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def navi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_e2b_server(tmp_path_factory.mktemp("e2b_cmd"), NAVI_WARM_POOL_SIZE="0")
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def tenant(navi: Server) -> tuple[str, str]:
    return navi.tenant_with_user()


@pytest.fixture(scope="module", autouse=True)
def e2b_env(navi: Server, tenant: tuple[str, str]) -> Iterator[str]:
    with e2b_vars(navi, tenant[1]) as key:
        yield key


@pytest.fixture(scope="module")
def sbx() -> Iterator[Sandbox]:
    sandbox = Sandbox.create(envs={"GREETING": "hello from envs"})
    yield sandbox
    sandbox.kill()


def test_foreground_run_with_envs_cwd_and_callbacks(sbx: Sandbox) -> None:
    seen: list[str] = []
    result = sbx.commands.run("echo $GREETING; sleep 1; echo oops >&2", on_stdout=seen.append)
    assert result.exit_code == 0
    assert "hello from envs" in result.stdout
    assert "oops" in result.stderr and "oops" not in result.stdout
    assert "hello from envs" in "".join(seen)
    sbx.files.write("/home/user/data/in.txt", "42")
    got = sbx.commands.run("cat in.txt", cwd="/home/user/data", envs={"X": "1"})
    assert got.stdout.strip() == "42"
    with pytest.raises(CommandExitException) as failed:
        sbx.commands.run("exit 3")
    assert failed.value.exit_code == 3


def test_stderr_before_the_stream_attaches_stays_stderr(sbx: Sandbox) -> None:
    """What a command writes at once is in its log before the SDK's stream follows it: the
    replay keeps the streams apart."""
    result = sbx.commands.run("echo early-err >&2; echo early-out; echo late-err >&2")
    assert (result.stdout, result.stderr) == ("early-out\n", "early-err\nlate-err\n")


def test_a_command_writes_what_files_read(sbx: Sandbox) -> None:
    sbx.commands.run("echo made-by-command > /home/user/out.txt")
    assert sbx.files.read("/home/user/out.txt").strip() == "made-by-command"


def test_home_user_is_the_workspace_the_cwd_and_home(sbx: Sandbox) -> None:
    assert sbx.commands.run("pwd").stdout == "/home/user\n"
    assert sbx.commands.run("echo $HOME").stdout == "/home/user\n"
    sbx.commands.run("echo tilde > ~/x")
    assert sbx.files.read("/home/user/x") == "tilde\n"
    assert sbx.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sbx.commands.run("test -e /workspace/x || echo apart").stdout == "apart\n"


def test_background_stdin_list_connect_kill(sbx: Sandbox) -> None:
    handle = sbx.commands.run("cat", background=True, stdin=True)
    pids = [p.pid for p in sbx.commands.list()]
    assert handle.pid in pids
    sbx.commands.send_stdin(handle.pid, "ping\n")
    out: list[str] = []
    for stdout, _, _ in handle:
        if stdout:
            out.append(stdout)
        if "ping" in "".join(out):
            break
    assert "ping" in "".join(out)
    again = sbx.commands.connect(handle.pid)  # a second client: new output only
    sbx.commands.send_stdin(handle.pid, "pong\n")
    for stdout, _, _ in again:
        if stdout and "pong" in stdout:
            break
    assert sbx.commands.kill(handle.pid)
    with pytest.raises(CommandExitException):
        again.wait()
    assert handle.pid not in [p.pid for p in sbx.commands.list()]


def test_closing_the_stream_does_not_stop_the_command(sbx: Sandbox) -> None:
    # it writes while the stream is gone: the server notices the closed stream, and goes on
    handle = sbx.commands.run("for i in 1 2 3 4 5 6; do echo tick; sleep 1; done; "
                              "echo done > /home/user/bg.txt", background=True)
    handle.disconnect()
    deadline = time.monotonic() + 60
    while not sbx.files.exists("/home/user/bg.txt") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert sbx.files.read("/home/user/bg.txt").strip() == "done"


def test_commands_are_navi_processes_audited(navi: Server, tenant: tuple[str, str],
                                             sbx: Sandbox) -> None:
    sbx.commands.run("echo audited")
    with navi.client(tenant[1]) as api:
        listed = api.get(f"/v1/sessions/{sbx.sandbox_id}/processes").json()
    assert any(p["command"] == "echo audited" for p in listed)
    starts = [r for r in audit(navi, tenant[0])
              if r.get("action") == "process.start" and r.get("session") == sbx.sandbox_id]
    assert starts


def test_writes_and_executes_are_audited(navi: Server, tenant: tuple[str, str],
                                         code: CodeSandbox) -> None:
    code.files.write("/home/user/audited.txt", "x")
    code.run_code("audited = 1")
    mine = [r for r in audit(navi, tenant[0]) if r.get("session") == code.sandbox_id]
    assert any(r.get("action") == "file.write" and r.get("object") == "audited.txt"
               for r in mine), mine
    assert any(r.get("tool") == "kernel_exec" and r.get("decision") == "allow"
               for r in mine), mine


@pytest.fixture(scope="module")
def locked_key(navi: Server) -> str:
    """A key of tenant `locked`, whose profile (secretary) denies group:exec."""
    return navi.tenant_with_user("locked")[1]


def test_policy_refusal_reaches_the_sdk_with_its_rule(locked_key: str) -> None:
    locked = Sandbox.create(api_key=locked_key)
    try:
        locked.files.write("ok.txt", "files are allowed")
        with pytest.raises(SandboxException, match="group:exec|profiles.secretary"):
            locked.commands.run("echo no")
    finally:
        locked.kill()


def test_pty_is_not_offered(sbx: Sandbox) -> None:
    from e2b.sandbox.commands.command_handle import PtySize

    with pytest.raises(SandboxException, match="not offered"):
        sbx.pty.create(PtySize(rows=24, cols=80))


@pytest.fixture(scope="module")
def code() -> Iterator[CodeSandbox]:
    sandbox = CodeSandbox.create()
    yield sandbox
    sandbox.kill()


def test_run_code_keeps_state_and_streams(code: CodeSandbox) -> None:
    code.run_code("x = 41")
    seen: list[str] = []
    execution = code.run_code("print('hi'); x + 1", on_stdout=lambda m: seen.append(m.line))
    assert execution.text == "42"
    assert execution.logs.stdout == ["hi\n"]
    assert any("hi" in s for s in seen)
    failed = code.run_code("1/0")
    assert failed.error is not None and failed.error.name == "ZeroDivisionError"


def test_run_code_sees_home_user(code: CodeSandbox) -> None:
    found = code.run_code("import os; (os.getcwd(), os.environ['HOME'])").text
    assert found == "('/home/user', '/home/user')"
    code.files.write("/home/user/from_files.txt", "seen")
    assert code.run_code("open('from_files.txt').read()").text == "'seen'"


def test_run_code_png_and_dataframe(code: CodeSandbox) -> None:
    chart = code.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
    assert any(r.png for r in chart.results), chart
    frame = code.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2]})")
    assert any(r.html and "<table" in r.html for r in frame.results), frame


def test_contexts_are_kernels_apart(code: CodeSandbox) -> None:
    ctx = code.create_code_context()
    code.run_code("y = 'in context'", context=ctx)
    assert code.run_code("y", context=ctx).text == "'in context'"
    assert code.run_code("'y' in dir()").text == "False"
    assert ctx.id in [c.id for c in code.list_code_contexts()]
    code.restart_code_context(ctx)
    assert code.run_code("'y' in dir()", context=ctx).text == "False"
    code.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in code.list_code_contexts()]


def test_run_code_is_refused_by_policy(locked_key: str) -> None:
    locked = CodeSandbox.create(api_key=locked_key)
    try:
        execution = locked.run_code("1 + 1")
        assert execution.error is not None
        assert "group:exec" in execution.error.value or "secretary" in execution.error.value
    finally:
        locked.kill()


def test_the_docs_quick_start_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    """README's E2B quick-start (docs/e2b.md's first Python block is the same), unchanged,
    with only the three variables set."""
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text().split("## Using the E2B SDK\n", 1)[1]
    block = readme.split("```python\n", 1)[1].split("```", 1)[0]
    docs = (root / "docs" / "e2b.md").read_text()
    assert docs.split("```python\n", 1)[1].split("```", 1)[0] == block
    exec(compile(block, "README.md", "exec"), {})  # noqa: S102 (our own docs)
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["hi", "", "1,2,3", "42"], printed


def test_a_revoked_key_ends_its_sandbox_commands(navi: Server, tenant: tuple[str, str]) -> None:
    """Sandbox-side calls act as the key that created the sandbox: its commands end within
    10 s of its revocation (reason `revoked`) and its access token stops working."""
    from e2b import AuthenticationException

    with navi.client(navi.admin_token) as admin:
        made = admin.post(f"/v1/tenants/{tenant[0]}/tokens", json={"role": "user"}).json()
    sbx = Sandbox.create(api_key=made["token"])
    try:
        handle = sbx.commands.run("sleep 600", background=True)
        handle.disconnect()
        with navi.client(navi.admin_token) as admin:
            admin.delete(f"/v1/tenants/{tenant[0]}/tokens/{made['id']}").raise_for_status()
        revoked = time.monotonic()
        found: dict[str, object] = {}
        with navi.client(tenant[1]) as api:
            while time.monotonic() - revoked < 30:
                found = api.get(f"/v1/sessions/{sbx.sandbox_id}/processes").json()[-1]
                if found["state"] == "exited":
                    break
                time.sleep(0.5)
        assert found["state"] == "exited" and found["reason"] == "revoked", found
        assert time.monotonic() - revoked < 20
        with pytest.raises(AuthenticationException):
            sbx.commands.list()
    finally:
        Sandbox.kill(sbx.sandbox_id)  # the tenant's live key (E2B_API_KEY)


def test_stdin_is_closed_unless_asked_for(sbx: Sandbox) -> None:
    """E2B's default stdin=False: the command reads EOF at once; with stdin=True it gets
    input until close_stdin()."""
    assert sbx.commands.run("cat; echo after-eof", timeout=60).stdout == "after-eof\n"
    handle = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.send_stdin(handle.pid, "fed\n")
    sbx.commands.close_stdin(handle.pid)
    result = handle.wait()
    assert result.exit_code == 0 and result.stdout == "fed\n"


def test_the_async_sdks_commands_and_run_code() -> None:
    """The async SDK: a foreground command with its stderr, a background one killed, and
    run_code keeping a name between two executes."""
    async def scenario() -> None:
        sbx = await AsyncCodeSandbox.create()
        try:
            done = await sbx.commands.run("echo out; echo err >&2")
            assert (done.stdout, done.stderr) == ("out\n", "err\n")
            handle = await sbx.commands.run("sleep 600", background=True)
            assert handle.pid in [p.pid for p in await sbx.commands.list()]
            assert await sbx.commands.kill(handle.pid)
            await sbx.run_code("n = 20")
            assert (await sbx.run_code("n + 1")).text == "21"
        finally:
            await sbx.kill()

    asyncio.run(scenario())
