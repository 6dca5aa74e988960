"""What crosses the hop for a background process on a node (`runtime.nodes.process_wire`),
and whom the node's process acts reach (`runtime.cluster.agent.processes`): no cluster
needed. A start names the session and its record, never a path; an act reaches only a
process of the session it names."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from runtime.cluster.agent.process_runs import NodeRun, NodeRuns
from runtime.cluster.agent.processes import NodeProcesses
from runtime.errors import InvalidInput
from runtime.nodes.failures import Failed
from runtime.nodes.process_wire import (
    ProcessAct,
    ProcessAttach,
    ProcessAttached,
    ProcessEnd,
    ProcessOnNode,
)
from runtime.nodes.wire import SESSION_TMP, SESSION_WORKSPACE, RunOnNode, parsed
from runtime.processes.outlog import OutputLog
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


def test_egress_crosses_by_value_and_bounded() -> None:
    back = parsed(ProcessOnNode, _start(network="egress", egress_allowlist=["pypi.org"]))
    assert (back.run.request.network, back.run.request.egress_allowlist) == (
        "egress", ["pypi.org"])
    for forged in ({"network": "egress"}, {"egress_allowlist": ["pypi.org"]},  # not one alone
                   {"network": "egress", "egress_allowlist": ["x" * 256]},
                   {"network": "egress", "egress_allowlist": ["a.org"] * 1025}):
        with pytest.raises(InvalidInput, match="refused node request"):
            parsed(ProcessOnNode, _start(**forged))


def _act(session: str, **fields: Any) -> bytes:
    return ProcessAct.model_validate({"tenant": TENANT, "session": session, "process": PID,
                                      **fields}).model_dump_json().encode()


async def test_an_act_reaches_only_a_process_of_the_session_it_names(tmp_path: Path) -> None:
    processes = NodeProcesses(None, None, lambda w: w.call(), _ready, None,  # type: ignore[arg-type]
                              tmp_path)
    theirs = new_session_id()
    processes.running[PID] = NodeRun(TENANT, theirs, "c0ffee", 60, OutputLog(tmp_path / "l"),
                                     stdin_open=False, lock=threading.Lock())
    other = await processes.act(_act(new_session_id(), op="input", data=b"x"))
    assert isinstance(other, Failed) and other.kind == "NotFound"
    closed = await processes.act(_act(theirs, op="input", data=b"x"))  # its stdin is shut
    assert isinstance(closed, Failed) and closed.kind == "Conflict"
    for bad in ({"op": "signal"}, {"op": "input", "signal": "KILL"},
                {"op": "signal", "signal": "STOP"}):
        with pytest.raises(ValueError):
            ProcessAct.model_validate({"tenant": TENANT, "session": theirs, "process": PID,
                                       **bad})


# -- re-attaching after a control-plane restart (`NodeAgent.process_attach`) ------------------

async def _ready() -> None:
    return None


def _attach(session: str, offset: int = 0) -> bytes:
    return ProcessAttach(tenant=TENANT, session=session, process=PID, offset=offset
                         ).model_dump_json().encode()


def test_an_attach_names_a_process_and_an_offset_only() -> None:
    for bad in ({"offset": -1}, {"process": "p_x"}, {"path": "/etc"}):
        with pytest.raises(InvalidInput, match="refused node request"):
            parsed(ProcessAttach, json.dumps({"tenant": TENANT, "session": new_session_id(),
                                              "process": PID, "offset": 0, **bad}).encode())


async def test_an_attach_reaches_only_a_process_of_the_session_it_names(tmp_path: Path) -> None:
    processes = NodeProcesses(None, None, lambda w: w.call(), _ready, None,  # type: ignore[arg-type]
                              tmp_path)
    theirs = new_session_id()
    run = await asyncio.to_thread(processes.runs.begin, PID, TENANT, theirs, "c0ffee", 60)
    [other] = [item async for item in processes.attach(_attach(new_session_id()))]
    assert isinstance(other, Failed) and other.kind == "NotFound"
    run.outlog.append(b"0123456789")
    run.end = ProcessEnd(exit_code=3)
    got = [item async for item in processes.attach(_attach(theirs, 4))]
    assert got[0] == ProcessAttached(container="c0ffee", offset=4, lifetime_s=60,
                                     stdin_open=True)
    assert b"".join(c.data for batch in got[1:-1] for c in batch) == b"456789"
    assert got[-1] == [ProcessEnd(exit_code=3)]  # then it is forgotten, its log removed
    assert PID not in processes.running and not list(tmp_path.glob(f"{PID}*"))


async def test_a_stream_follows_the_nodes_log_from_an_offset_and_a_newer_one_supersedes_it(
    tmp_path: Path,
) -> None:
    runs = NodeRuns(tmp_path)
    run = await asyncio.to_thread(runs.begin, PID, TENANT, new_session_id(), "c0ffee", 60)
    run.outlog.append(b"one\n")
    old = runs.follow(PID, run, 0)
    assert [c.data for c in await old.__anext__()] == [b"one\n"]
    new = runs.follow(PID, run, 2)  # the next start, from where its own log ended
    first = asyncio.ensure_future(new.__anext__())
    run.outlog.append(b"two\n", "stderr")
    run.changed.set()
    assert [(c.data, c.stream) for c in await first] == [(b"e\n", "stdout"),
                                                         (b"two\n", "stderr")]
    assert [item async for item in old] == []  # superseded: it ends, the process does not
    run.end = ProcessEnd(exit_code=0)
    run.changed.set()
    assert await new.__anext__() == [ProcessEnd(exit_code=0)]
