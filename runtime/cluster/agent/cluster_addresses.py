"""The cluster's own machines, which no sandbox's egress may reach (issue 33).

On the node side: only the node agent (`runtime.cluster.agent`) keeps this set, so it lives
beside it, below the cluster package that joins and places nodes.

The egress proxy refuses private, link-local and loopback addresses, so a cluster on a
private network is out of reach already; one whose machines have public addresses is not.
A node agent keeps this set (every Ray node's `NodeManagerAddress`, and the drivers' - the
control plane's - addresses) and hands it to its backend's egress proxies, which refuse
those addresses after DNS whatever the policy allows. It is read before the agent takes
work and again every `REFRESH_S`, so a node that joins is refused within that time.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from runtime.egress.rules import IPAddress
from runtime.logging import get_logger

log = get_logger(__name__)

REFRESH_S = 2.0


def addresses_of(nodes: Iterable[Mapping[str, Any]],
                 jobs: Iterable[Mapping[str, Any]] = ()) -> frozenset[IPAddress]:
    """Every node's `NodeManagerAddress` (dead ones too: they may come back) and every
    driver's `DriverIPAddress`, from what `ray.nodes()` and Ray's job table answered."""
    found: set[IPAddress] = set()
    texts = [str(n.get("NodeManagerAddress") or "") for n in nodes]
    texts += [str(j.get("DriverIPAddress") or "") for j in jobs]
    for text in texts:
        with contextlib.suppress(ValueError):
            found.add(ipaddress.ip_address(text.split("%", 1)[0]))
    return frozenset(found)


class ClusterAddresses:
    """A `DeniedAddresses`: call it for the current set; `refresh` (blocking) reads Ray."""

    def __init__(self) -> None:
        self.current: frozenset[IPAddress] = frozenset()

    def __call__(self) -> frozenset[IPAddress]:
        return self.current

    def refresh(self) -> None:
        import ray
        from ray._private import state

        # a refresh never drops an address: a machine that left may come back
        self.current = self.current | addresses_of(
            ray.nodes(), state.jobs())  # type: ignore[no-untyped-call]

    async def follow(self) -> None:
        """Refresh every `REFRESH_S` (on a worker thread) until cancelled."""
        while True:
            await asyncio.sleep(REFRESH_S)
            try:
                await asyncio.to_thread(self.refresh)
            except Exception as exc:  # the head away: keep the set, try again
                log.warning("cluster_addresses_refresh_failed", error=str(exc))
