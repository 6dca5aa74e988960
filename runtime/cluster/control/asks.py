"""The control plane's answers to a node's questions: what a tenant holds elsewhere.

A node asks before it mounts an idle session's disk again or makes a copy on it
(`runtime.cluster.agent.asks`); `answer_asks` keeps the node's stream of questions open for
as long as the node is in the cluster and answers each one (in a task of its own: one slow
count never holds up another) with `count` (`runtime.nodes.elsewhere.tenant_elsewhere`).
A question that is not JSON of `ElsewhereAsk` is dropped (the node then counts its last
figure); a stream that ends is opened again, a lost node ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import ray

from runtime.cluster.control.hop import Hop, batches, wire
from runtime.errors import NodeUnavailable
from runtime.logging import get_logger
from runtime.nodes.base import SessionNode
from runtime.nodes.elsewhere_wire import ElsewhereAnswer, ElsewhereAsk
from runtime.nodes.wire import HeldBytes, parsed
from runtime.workspace.disk import TenantBytes

log = get_logger(__name__)

Count = Callable[[str, SessionNode], Awaitable[TenantBytes]]
REOPEN_S = 1.0  # a stream that ended (not a lost node): opened again after this


async def answer_asks(hop: Hop, node: SessionNode, count: Count) -> None:
    """Answer `node`'s questions until it is lost (or this task is cancelled)."""
    answering: set[asyncio.Task[None]] = set()
    stream: Any = None
    try:
        while True:
            try:
                stream = hop.actor.elsewhere_asks.options(num_returns="streaming").remote()
                async for raw in batches(hop, stream):
                    task = asyncio.create_task(_answer(hop, node, count, raw))
                    answering.add(task)
                    task.add_done_callback(answering.discard)
            except NodeUnavailable:
                return
            except Exception as exc:  # the agent's error: ask again in a moment
                log.warning("elsewhere_asks_failed", node=hop.node_id, error=str(exc))
            await asyncio.sleep(REOPEN_S)
    finally:
        for task in answering:
            task.cancel()
        if stream is not None:
            with contextlib.suppress(Exception):
                ray.cancel(stream)


async def _answer(hop: Hop, node: SessionNode, count: Count, raw: object) -> None:
    try:
        question = parsed(ElsewhereAsk, raw)
        held = await count(question.tenant, node)
        await hop.wait(hop.actor.elsewhere_answer.remote(wire(ElsewhereAnswer(
            ask=question.ask, held=HeldBytes.of(held)))))
    except Exception as exc:  # the node counts its last figure when its wait ends
        log.warning("elsewhere_not_answered", node=hop.node_id, error=str(exc))
