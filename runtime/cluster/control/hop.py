"""One node agent's actor handle, seen from the control plane, and what its failure means.

Every call to a node goes through a `Hop`: `get` (blocking) or `wait` (async) for the
answer; a `Failed` from the agent is raised as the error it was
(`runtime.nodes.failures`); a dead or unreachable agent is `NodeUnavailable` (503, naming
the node), after `on_lost(node_id)` so the cluster stops sending work there at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import ray
import ray.exceptions
from pydantic import BaseModel

from runtime.errors import NodeUnavailable
from runtime.nodes.failures import Failed, raise_failed

OP_TIMEOUT_S = 60.0  # a file or disk operation the node does not answer in this is lost
LOST = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
        ray.exceptions.GetTimeoutError, ray.exceptions.ObjectLostError,
        ray.exceptions.NodeDiedError, ray.exceptions.RaySystemError, ConnectionError)


def wire(model: BaseModel) -> bytes:
    """A request as the agent takes it: JSON (`runtime.nodes.wire`)."""
    return model.model_dump_json().encode()


class Hop:
    """The actor handle, its node id and what a failure of either means."""

    def __init__(self, node_id: str, actor: Any,
                 on_lost: Callable[[str], None] | None) -> None:
        self.node_id = node_id
        self.actor = actor
        self.on_lost = on_lost

    def lost(self, exc: BaseException) -> NodeUnavailable:
        if self.on_lost is not None:
            with contextlib.suppress(Exception):
                self.on_lost(self.node_id)
        return NodeUnavailable(self.node_id, f"node {self.node_id} is unavailable "
                               f"({type(exc).__name__})")

    def get(self, ref: Any) -> Any:
        """Wait for one answer (blocking); a `Failed` is raised as what it was."""
        try:
            value = ray.get(ref, timeout=OP_TIMEOUT_S)
        except LOST as exc:
            raise self.lost(exc) from None
        if isinstance(value, Failed):
            raise_failed(value)
        return value

    async def wait(self, ref: Awaitable[Any]) -> Any:
        try:
            value = await ref
        except LOST as exc:
            raise self.lost(exc) from None
        if isinstance(value, Failed):
            raise_failed(value)
        return value


    def call(self, method: str, *args: Any) -> Any:
        """One agent method, waited for (blocking)."""
        try:
            ref = getattr(self.actor, method).remote(*args)
        except LOST as exc:
            raise self.lost(exc) from None
        return self.get(ref)


async def open_when_durable(link: Hop, stream: Any, exec_id: str,
                            before_start: Awaitable[object] | None) -> None:
    """A gated call's start: once the control plane's audit intent is durable
    (`before_start`), the node may run it; if that fails, the node runs nothing and the
    stream is cancelled."""
    if before_start is None:
        return
    try:
        await before_start
    except BaseException:
        link.actor.open_gate.remote(exec_id, False)  # nothing runs
        with contextlib.suppress(Exception):
            ray.cancel(stream)
        raise
    link.actor.open_gate.remote(exec_id, True)  # the intent is durable


async def batches(link: Hop, stream: Any) -> AsyncGenerator[Any, None]:
    """The messages of a streaming call, each waited for (a lost node raises)."""
    while True:
        try:
            ref = await stream.__anext__()
        except StopAsyncIteration:
            return
        except LOST as exc:
            raise link.lost(exc) from None
        yield await link.wait(ref)
