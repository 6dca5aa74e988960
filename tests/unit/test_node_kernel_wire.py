"""What a node agent takes for a session's kernels: ids only, checked before anything is
opened (`runtime.cluster.kernel_wire.KernelOp`; an execute is a `RunOnNode`, tested with calls)."""

from __future__ import annotations

import json

import pytest

from runtime.cluster.kernel_wire import KernelOp
from runtime.errors import InvalidInput
from runtime.nodes.wire import parsed

T, S = "t_0123456789abcdef", "s_0123456789abcdef"


def op(**fields: object) -> bytes:
    return json.dumps({"tenant": T, "session": S, **fields}).encode()


def test_well_formed_requests_parse() -> None:
    assert parsed(KernelOp, op(op="stop", name="default")).name == "default"
    assert parsed(KernelOp, op(op="list")).session == S
    assert parsed(KernelOp, json.dumps({"op": "save_idle", "unused_s": 600}).encode()
                  ).unused_s == 600


@pytest.mark.parametrize("fields", [
    {"op": "stop", "name": "../default"},
    {"op": "stop", "name": "Default"},
    {"op": "stop"},  # which kernel
    {"op": "stop_running"},
    {"op": "list", "session": "../s_0123456789abcdef"},
    {"op": "list", "tenant": "../../etc"},
    {"op": "list", "path": "/etc"},
    {"op": "kill"},
    {"op": "kill", "exec_id": "a/b"},
    {"op": "save_idle"},
    {"op": "save_idle", "unused_s": -1},
    {"op": "exec", "code": "1"},
], ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()))
def test_a_path_or_an_incomplete_request_is_refused(fields: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        parsed(KernelOp, op(**fields))


def test_an_op_needing_the_session_refuses_one_without_it() -> None:
    with pytest.raises(InvalidInput):
        parsed(KernelOp, json.dumps({"op": "list"}).encode())
    with pytest.raises(InvalidInput):
        parsed(KernelOp, json.dumps({"op": "end_session"}).encode())
