"""What crosses the hop to a node (`runtime.nodes.wire`) and the node's tool objects: no
cluster needed. A request names the session and what to mount; any path in it, any field
it should not have, anything that is not JSON is refused; a tool object is kept only under
the hash of its bytes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from runtime.cluster.agent.objects import NodeObjects
from runtime.errors import InvalidInput, NotFound
from runtime.nodes.wire import (
    SESSION_TMP,
    SESSION_WORKSPACE,
    FileOp,
    ObjectMount,
    RunOnNode,
    Where,
    parsed,
)
from runtime.sandbox.models import ExecRequest
from runtime.store.ids import new_session_id, new_tenant_id


def _call(**extra: object) -> ExecRequest:
    return ExecRequest(argv=["true"], image="x", exec_id="ex_1", tenant=new_tenant_id(),
                       session=new_session_id(), stdin=b"\xff\x00 not utf-8",
                       workspace=SESSION_WORKSPACE, tmp=SESSION_TMP, **extra)  # type: ignore[arg-type]


def _json(call: ExecRequest, **request: object) -> bytes:
    body = json.loads(RunOnNode.of(call, [], True).model_dump_json())
    body["request"].update(request)
    return json.dumps(body).encode()


def test_a_call_crosses_as_json_with_its_stdin_and_names() -> None:
    call = _call()
    back = parsed(RunOnNode, RunOnNode.of(call, [], True).model_dump_json().encode())
    assert back.call() == call and back.gated


@pytest.mark.parametrize("forged", [
    {"workspace": "/etc"}, {"tmp": "/etc"}, {"workspace": "/var/lib/navi/workspaces/t/s"},
    {"mounts": [{"source": "/etc/shadow", "target": "/opt/x", "read_only": True}]},
    {"stdin": "aGk="},  # stdin travels beside the request
])
def test_a_request_naming_a_path_is_refused(forged: dict[str, object]) -> None:
    with pytest.raises(InvalidInput, match="refused node request"):
        parsed(RunOnNode, _json(_call(), **forged))


def test_what_is_not_a_request_is_refused() -> None:
    for payload in (_call(), {"tenant": "x"}, b"\x80\x04pickle", b"{}"):
        with pytest.raises(InvalidInput):
            parsed(RunOnNode, payload)
    with pytest.raises(InvalidInput, match="Extra inputs"):
        parsed(Where, json.dumps({"tenant": new_tenant_id(), "session": new_session_id(),
                                  "path": "/etc"}))
    with pytest.raises(InvalidInput):
        parsed(Where, json.dumps({"tenant": "../etc", "session": new_session_id()}))
    with pytest.raises(InvalidInput, match="option"):
        parsed(FileOp, json.dumps({"tenant": new_tenant_id(), "session": new_session_id(),
                                   "op": "stat", "kwargs": {"follow": True}}))
    with pytest.raises(InvalidInput, match="op"):
        parsed(FileOp, json.dumps({"tenant": new_tenant_id(), "session": new_session_id(),
                                   "op": "__class__"}))


def test_tool_objects_are_kept_under_their_hash_only(tmp_path: Path) -> None:
    objects = NodeObjects(tmp_path / "objects")
    code = b"print(1)\n"
    sha = hashlib.sha256(code).hexdigest()
    with pytest.raises(NotFound):
        objects.get(sha)
    with pytest.raises(InvalidInput, match="hash"):
        objects.put(sha, b"print(2)\n")
    with pytest.raises(InvalidInput):
        objects.put("../../etc/passwd", code)
    kept = objects.put(sha, code)
    assert objects.get(sha) == kept and kept.read_bytes() == code
    assert kept.stat().st_mode & 0o777 == 0o444
    assert ObjectMount(sha256=sha, target="/opt/navi/tool.py").data is None
