"""Sandboxed tools through the real Executor (real audit file, FakeBackend): what they ask to
run, how results map, that the policy and the audit see the user tool's content hash."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtime.config import PROJECT_ROOT
from runtime.errors import NotFound, PolicyDenied
from runtime.policy import Action, Decision, PolicyEngine, Subject
from runtime.sandbox.fake import FakeResponse
from runtime.sandbox.models import ExecRequest, OutputChunk
from runtime.sandbox.stdin_program import BASH, PYTHON_ARGV, SHELL_STUB
from runtime.tools.user.tool import RUNNER_ARGV, TOOL_MOUNT
from tests.fakes.calls import call
from tests.fakes.tool_rigs import FakeRig, open_fake_rig

SHOUT = (
    'name = "shout"\ndescription = "Upper-case a text."\n'
    'parameters = {"type": "object", "properties": {"text": {"type": "string"}}, '
    '"required": ["text"]}\n'
    "async def execute(params):\n    return params['text'].upper()\n"
)


Rig = FakeRig


async def make_rig(tmp_path: Path, policy: str = "default.yaml") -> Rig:
    return await open_fake_rig(tmp_path, PolicyEngine.from_file(PROJECT_ROOT / "policies" / policy))


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    r = await make_rig(tmp_path)
    yield r
    await r.close()


async def test_code_exec_python_and_bash(rig: Rig) -> None:
    reg = rig.services.registry
    rig.backend.push(FakeResponse(stdout=b"2\n"), FakeResponse(exit_code=3, stderr=b"boom\n"))
    ok = await call(reg, "code_exec", {"language": "python", "code": "print(1+1)"}, rig.ctx())
    bad = await call(reg, "code_exec", {"language": "bash", "code": "exit 3"}, rig.ctx())
    py_req, sh_req = rig.backend.requests
    # the code goes over stdin after a constant stub, never on the command line
    assert py_req.image == "navi/python:latest" and py_req.argv == list(PYTHON_ARGV)
    assert py_req.stdin == b"\x00\x00\x00\x0aprint(1+1)"
    assert sh_req.argv == [*BASH, SHELL_STUB, "bash"] and sh_req.stdin == b"exit 3\x00"
    assert py_req.workspace == rig.workspace and py_req.session == "s1"
    assert ok.success and ok.output == "2\n" and ok.metadata["exit_code"] == 0
    assert ok.metadata["rule"] == "profiles.developer.allow[group:exec]"
    assert ok.metadata["audit_seq"] and ok.metadata["exec_id"] == py_req.exec_id
    assert not bad.success and bad.error == "exit code 3" and "[stderr]\nboom" in bad.output
    assert bad.metadata["ok"] is False and bad.metadata["stderr"] == "boom\n"


async def test_terminal_streams_output_and_timeout_maps(rig: Rig) -> None:
    chunks: list[OutputChunk] = []

    async def on_output(chunk: OutputChunk) -> None:
        chunks.append(chunk)

    rig.backend.push(FakeResponse(stdout=b"a\n", stderr=b"b\n"),
                     FakeResponse(exit_code=None, timed_out=True))
    reg = rig.services.registry
    r = await call(reg, "terminal", {"command": "ls"}, rig.ctx(on_output=on_output,
                                                               exec_id="ex_given"))
    assert [(c.stream, c.data) for c in chunks] == [("stdout", b"a\n"), ("stderr", b"b\n")]
    assert r.metadata["exec_id"] == "ex_given"
    assert rig.backend.requests[0].argv == [*BASH, SHELL_STUB, "bash"]
    assert rig.backend.requests[0].stdin == b"ls\x00"
    t = await call(reg, "terminal", {"command": "sleep 99"}, rig.ctx(timeout_s=5))
    assert not t.success and t.error == "timed out after 5 s" and t.metadata["timed_out"]
    assert rig.backend.requests[1].limits.timeout_s == 5


async def test_denials_go_through_the_executor_and_are_audited(rig: Rig) -> None:
    reg = rig.services.registry
    with pytest.raises(PolicyDenied):
        await call(reg, "code_exec", {"language": "python", "code": "1"}, rig.ctx("secretary"))
    with pytest.raises(PolicyDenied):  # a tool that runs no code: still decided and audited
        await call(reg, "write_tool", {"name": "shout", "code": SHOUT}, rig.ctx("secretary"))
    denied = await rig.audit.records(kind="denied")
    assert [r.tool for r in denied] == ["code_exec", "write_tool"]
    assert rig.backend.requests == []


async def test_user_tool_lifecycle_runs_the_runner_with_the_hash(rig: Rig) -> None:
    reg = rig.services.registry
    ctx = rig.ctx()
    await call(reg, "list_tools", {}, ctx)  # the tenant's snapshot is taken
    wrote = await call(reg, "write_tool", {"name": "shout", "code": SHOUT}, ctx)
    digest = wrote.metadata["sha256"]
    # callable by its name at once (no reload_tools); what runs is the file just written
    assert (await reg.spec("shout", ctx.subject)).group == "group:user_tools"

    rig.backend.push(FakeResponse(stdout=b'{"ok": true, "result": "HI"}\n', stderr=b"log\n"))
    tested = await call(reg, "test_tool", {"name": "shout", "params": {"text": "hi"}}, ctx)
    assert tested.success and tested.output == "HI"
    req: ExecRequest = rig.backend.requests[-1]
    assert req.image == "navi/tools-runner:latest" and req.argv[:-1] == RUNNER_ARGV
    assert json.loads(req.stdin) == {"text": "hi"}
    [mount] = req.mounts
    assert mount.target == TOOL_MOUNT and mount.read_only
    # an immutable copy named by its hash is mounted, never the path write_tool replaces
    assert mount.source.name == f"{digest}.py"
    assert mount.source.parent == rig.services.user_tools.store.root / ".objects" / "t1"
    assert mount.source.read_bytes() == (
        rig.services.user_tools.store.tenant_dir("t1") / "shout.py").read_bytes()
    assert req.argv[-1] == digest and "NAVI_TOOL_SHA256" not in req.env

    reloaded = await call(reg, "reload_tools", {}, ctx)
    assert "shout" in reloaded.metadata["loaded"]
    rig.backend.push(FakeResponse(stdout=b'{"ok": false, "error": "tool raised: KeyError"}\n'))
    failed = await call(reg, "shout", {"text": "x"}, ctx)
    assert not failed.success and failed.error == "tool raised: KeyError"
    assert failed.metadata["tool_hash"] == digest
    intents = await rig.audit.records(kind="intent")
    assert [(r.tool, r.tool_hash) for r in intents] == [("shout", digest), ("shout", digest)]
    assert intents[-1].rule == "profiles.developer.allow[group:user_tools]"

    # bad arguments never reach the executor
    n = len(rig.backend.requests)
    with pytest.raises(Exception, match="'text' is a required property"):
        await call(reg, "shout", {}, ctx)
    assert len(rig.backend.requests) == n

    await call(reg, "delete_tool", {"name": "shout"}, ctx)
    with pytest.raises(NotFound):
        await call(reg, "shout", {"text": "x"}, ctx)


@pytest.mark.parametrize(
    ("stdout", "error"),
    [
        (b"", "no result"),
        (b"not json\n", "not JSON"),
        (b'{"ok": true, "result": "a"}\n{"ok": true, "result": "b"}\n', "more than one line"),
        (b'{"result": "a"}\n', "malformed"),
    ],
)
async def test_malformed_runner_output_is_a_failure(rig: Rig, stdout: bytes, error: str) -> None:
    rig.backend.push(FakeResponse(stdout=stdout))
    r = await call(rig.services.registry, 
        "word_count", {"text": "a b"}, rig.ctx()
    )
    assert not r.success and error in (r.error or "")


async def test_changed_tool_file_is_refused_until_reload(rig: Rig) -> None:
    reg = rig.services.registry
    ctx = rig.ctx()
    await call(reg, "write_tool", {"name": "shout", "code": SHOUT}, ctx)
    await call(reg, "reload_tools", {}, ctx)
    # the file changes behind the snapshot's back (not through write_tool, which reloads it)
    (rig.services.user_tools.store.tenant_dir("t1") / "shout.py").write_text(SHOUT + "\n# v2\n")
    with pytest.raises(Exception, match="changed since it was loaded"):
        await call(reg, "shout", {"text": "x"}, ctx)
    assert rig.backend.requests == []


async def test_strict_policy_asks_for_user_tools_and_hash_changes(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path, "strict.yaml")
    try:
        asked: list[tuple[str, str | None]] = []

        async def approve(subject: Subject, action: Action, decision: Decision) -> bool:
            asked.append((action.tool, action.tool_hash))
            return True

        reg = rig.services.registry
        ctx = rig.ctx(approver=approve)
        await call(reg, "write_tool", {"name": "shout", "code": SHOUT}, ctx)
        await call(reg, "reload_tools", {}, ctx)
        rig.backend.push(FakeResponse(stdout=b'{"ok": true, "result": "X"}\n'))
        assert (await call(reg, "shout", {"text": "x"}, ctx)).success
        digest = (await rig.audit.records(kind="intent"))[-1].tool_hash
        assert asked == [("write_tool", None), ("shout", digest)]
        with pytest.raises(PolicyDenied):  # no approver: an ask is a denial
            await call(reg, "shout", {"text": "x"}, rig.ctx())
    finally:
        await rig.services.close()
        await rig.audit.close()
