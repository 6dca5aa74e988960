"""The control plane's view of Ray's node table, and its token file rules (no Ray needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.cluster.link import RayNode, check_token, pick
from runtime.errors import ClusterError


def raw(ray_id: str, ip: str, alive: bool, label: str | None, navi: bool = True) -> dict:
    return {"NodeID": ray_id, "NodeManagerAddress": ip, "Alive": alive,
            "Resources": {"navi_node": 1.0} if navi and alive else {},
            "Labels": {"navi-node": label} if label else {}}


def test_execution_nodes_by_label_the_head_left_out_a_returned_node_once() -> None:
    found = pick([
        raw("h", "10.0.0.1", True, None, navi=False),  # the head: no navi_node
        raw("a2", "10.0.0.2", True, "n1"),  # n1 came back (Ray lists it before ...)
        raw("a1", "10.0.0.2", False, "n1"),  # ... its dead former self): one n1, alive
        raw("b1", "10.0.0.3", False, "n2"),  # n2 dead: kept, dead
        raw("c1", "10.0.0.4", True, None),  # no label: its address is its id
    ])
    assert found == [RayNode("n1", "10.0.0.2", "a2", True), RayNode("n2", "10.0.0.3", "b1", False),
                     RayNode("10.0.0.4", "10.0.0.4", "c1", True)]


def test_the_token_file_must_be_the_owners_alone(tmp_path: Path) -> None:
    token = tmp_path / "cluster-token"
    with pytest.raises(ClusterError, match="does not exist"):
        check_token(token)
    token.write_text("")
    token.chmod(0o600)
    with pytest.raises(ClusterError, match="empty"):
        check_token(token)
    token.write_text("ab" * 32)
    token.chmod(0o640)
    with pytest.raises(ClusterError, match="chmod 600"):
        check_token(token)
    token.chmod(0o600)
    check_token(token)
