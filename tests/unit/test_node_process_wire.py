"""What crosses the hop for a background process on a node (`runtime.nodes.process_wire`),
and whom the node's process acts reach (`runtime.cluster.agent.processes`): no cluster
needed. A start names the session and its record, never a path; an act reaches only a
process of the session it names."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from runtime.cluster.agent.processes import NodeProcesses, _Running
from runtime.errors import InvalidInput
from runtime.nodes.failures import Failed
from runtime.nodes.process_wire import ProcessAct, ProcessOnNode
from runtime.nodes.wire import SESSION_TMP, SESSION_WORKSPACE, RunOnNode, parsed
from runtime.sandbox.models import ExecRequest
from runtime.store.ids import new_session_id, new_tenant_id

PID = "p_0123456789abcdef"
TENANT = new_tenant_id()


def _start(**request: object) -> bytes:
    call = ExecRequest(argv=["bash"], image="x", exec_id=PID, tenant=new_tenant_id(),
                       session=new_session_id(), workspace=SESSION_WORKSPACE, tmp=SESSION_TMP)
    body = json.loads(ProcessOnNode(run=RunOnNode.of(call, [], False), record=PID,
                                    lifetime_s=60, frame=b"echo hi\x00").model_dump_json())
    body["run"]["request"].update(request)
    return json.dumps(body).encode()


def test_a_start_crosses_as_json_with_its_frame_and_names() -> None:
    back = parsed(ProcessOnNode, _start())
    assert back.frame == b"echo hi\x00" and back.run.request.workspace == SESSION_WORKSPACE


@pytest.mark.parametrize("forged", [
    {"workspace": "/etc"}, {"tmp": "/var/lib/navi/workspaces/t/s/tmp"},
    {"mounts": [{"source": "/etc/shadow", "target": "/opt/x", "read_only": True}]},
    {"exec_id": "p_fedcba9876543210"},  # another record's name
])
def test_a_start_naming_a_path_or_another_record_is_refused(forged: dict[str, object]
                                                             ) -> None:
    with pytest.raises(InvalidInput, match="refused node request"):
        parsed(ProcessOnNode, _start(**forged))


def _act(session: str, **fields: Any) -> bytes:
    return ProcessAct.model_validate({"tenant": TENANT, "session": session, "process": PID,
                                      **fields}).model_dump_json().encode()


async def test_an_act_reaches_only_a_process_of_the_session_it_names() -> None:
    processes = NodeProcesses(None, None, lambda w: w.call(), lambda: None, None)  # type: ignore[arg-type]
    theirs = new_session_id()
    processes.running[PID] = _Running(TENANT, theirs, "c0ffee", None, stdin_open=False,
                                      lock=threading.Lock())
    other = await processes.act(_act(new_session_id(), op="input", data=b"x"))
    assert isinstance(other, Failed) and other.kind == "NotFound"
    closed = await processes.act(_act(theirs, op="input", data=b"x"))  # its stdin is shut
    assert isinstance(closed, Failed) and closed.kind == "Conflict"
    for bad in ({"op": "signal"}, {"op": "input", "signal": "KILL"},
                {"op": "signal", "signal": "STOP"}):
        with pytest.raises(ValueError):
            ProcessAct.model_validate({"tenant": TENANT, "session": theirs, "process": PID,
                                       **bad})
