"""A node's question to its control plane, and the answer: what a tenant holds elsewhere.

Why: a node admits a disk mounted again (a session's first use after it went idle) or a
copy (a snapshot, a restore's growth) against the tenant's quota; in a cluster that counts
what the tenant holds on every other machine, which only the control plane can add up
(`runtime.nodes.elsewhere`). The node asks on the stream its control plane keeps open
(`runtime.cluster.agent.asks`), the control plane answers by the ask's id. Both ends
validate: the control plane takes no path or other field from a node, the node no forged
figure (`HeldBytes`: non-negative, bounded).
"""

from __future__ import annotations

from pydantic import Field

from runtime.nodes.wire import HeldBytes, TenantOf, _Wire

ASK_ID = r"^[0-9a-f]{16}$"


class ElsewhereAsk(TenantOf):
    """A node's question: what does `tenant` hold on the cluster's other machines?"""

    ask: str = Field(pattern=ASK_ID)


class ElsewhereAnswer(_Wire):
    """The control plane's answer to the ask `ask`: the tenant's bytes on every machine
    but the asking node, as its disk quota counts them."""

    ask: str = Field(pattern=ASK_ID)
    held: HeldBytes
