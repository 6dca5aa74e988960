"""The cluster's own machines as the node agent's egress proxies refuse them (no Ray, no
traffic: what `ray.nodes()` and the job table answer is given as data)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from runtime.cluster.agent.actor import NodeAgent
from runtime.cluster.agent.cluster_addresses import ClusterAddresses, addresses_of


def test_every_node_and_driver_address_is_taken_and_junk_skipped() -> None:
    nodes: list[dict[str, object]] = [
        {"NodeManagerAddress": "203.0.113.7", "Alive": True},  # the head
        {"NodeManagerAddress": "203.0.113.8", "Alive": False},  # dead: may come back
        {"NodeManagerAddress": "2001:db8::5%eth0"}, {"NodeManagerAddress": ""}, {}]
    jobs = [{"DriverIPAddress": "203.0.113.20"}, {"DriverIPAddress": "not an address"}]
    assert addresses_of(nodes, jobs) == frozenset(
        ipaddress.ip_address(a) for a in ("203.0.113.7", "203.0.113.8", "2001:db8::5",
                                          "203.0.113.20"))


def test_the_node_agent_hands_its_cluster_addresses_to_its_egress_proxies(
    tmp_path: Path,
) -> None:
    """Red if the agent does not wire its set into the backend (whose proxies read it)."""
    agent = NodeAgent("n1", str(tmp_path), disks=False)
    assert isinstance(agent.cluster_addresses, ClusterAddresses)
    assert agent.backend.egress_denied is agent.cluster_addresses
    agent.cluster_addresses.current = frozenset({ipaddress.ip_address("203.0.113.7")})
    denied = agent.backend.egress_denied
    assert denied is not None and ipaddress.ip_address("203.0.113.7") in denied()
