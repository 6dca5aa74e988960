"""A node's questions to its control plane: what a tenant holds on the other machines.

Why: a session's disk mounted again after it went idle, and a copy made on its disk (a
snapshot, a restore's growth), are admitted on the node against the tenant's quota, which
counts every machine's disks. Only the control plane can add those up. Every such mount or
copy happens while a request of the control plane is in flight (a call, a file operation,
a snapshot), so the control plane is there to ask: it keeps one stream open to each agent
(`listen`, `runtime.cluster.control.asks`), the node puts its question on it and waits for
the answer (`answer`) before it admits. A session in use costs nothing: its disk is mounted,
nothing is asked; only the first use after idle (and a copy) waits for one round trip.

When no control plane listens (it is restarting) or it does not answer within
`ASK_TIMEOUT_S`, the node counts the last figure it was told for the tenant (an ask's answer,
or a create's `CreateDisk.elsewhere`), never nothing it was told more than.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import secrets
import threading
from collections.abc import AsyncIterator

from runtime.logging import get_logger
from runtime.nodes.elsewhere_wire import ElsewhereAnswer, ElsewhereAsk
from runtime.nodes.wire import parsed
from runtime.workspace.disk import NOTHING, TenantBytes

log = get_logger(__name__)

ASK_TIMEOUT_S = 10.0  # an answer the control plane does not give in this: the last figure
KEEPALIVE_S = 5.0  # how often a listener checks it was not replaced by a newer one


class ElsewhereAsks:
    """The node's side: `ask` (blocking, from the worker thread admitting a mount or copy),
    `listen` (the control plane's stream of questions), `answer` (its answers)."""

    def __init__(self, timeout_s: float = ASK_TIMEOUT_S) -> None:
        """`ask` is what the node's `Machine` counts as a tenant's bytes elsewhere."""
        self.timeout_s = timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[ElsewhereAsk] | None = None  # the current listener's
        self._waiting: dict[str, concurrent.futures.Future[TenantBytes]] = {}
        self._last: dict[str, TenantBytes] = {}  # tenant -> the figure it was last told
        self._lock = threading.Lock()

    def told(self, tenant_id: str, held: TenantBytes) -> None:
        """A figure the control plane sent with a request (a create's)."""
        with self._lock:
            self._last[tenant_id] = held

    def last(self, tenant_id: str) -> TenantBytes:
        with self._lock:
            return self._last.get(tenant_id, NOTHING)

    def ask(self, tenant_id: str) -> TenantBytes:
        """What the tenant holds on the cluster's other machines, as the control plane
        counts it now (blocking: never call it on the agent's event loop)."""
        with self._lock:
            loop, queue = self._loop, self._queue
        if loop is None or queue is None or _on_loop():
            log.warning("elsewhere_not_asked", tenant=tenant_id,
                        reason="no listener" if queue is None else "asked on the loop")
            return self.last(tenant_id)
        question = ElsewhereAsk(ask=secrets.token_hex(8), tenant=tenant_id)
        waiting: concurrent.futures.Future[TenantBytes] = concurrent.futures.Future()
        self._waiting[question.ask] = waiting
        try:
            loop.call_soon_threadsafe(queue.put_nowait, question)
            held = waiting.result(timeout=self.timeout_s)
        except (concurrent.futures.TimeoutError, RuntimeError):  # no answer, or loop closed
            log.warning("elsewhere_not_answered", tenant=tenant_id)
            return self.last(tenant_id)
        finally:
            self._waiting.pop(question.ask, None)
        self.told(tenant_id, held)
        return held

    def answer(self, payload: object) -> None:
        """The control plane's answer (`ElsewhereAnswer`); one to no ask waiting is dropped."""
        given = parsed(ElsewhereAnswer, payload)
        waiting = self._waiting.get(given.ask)
        if waiting is not None and not waiting.done():
            waiting.set_result(given.held.bytes())

    async def listen(self) -> AsyncIterator[bytes]:
        """The control plane's stream: each question as JSON while it is the newest
        listener (a control plane started again replaces its predecessor's stream)."""
        queue: asyncio.Queue[ElsewhereAsk] = asyncio.Queue()
        with self._lock:
            self._loop, self._queue = asyncio.get_running_loop(), queue
        try:
            while self._queue is queue:
                try:
                    question = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    continue
                yield question.model_dump_json().encode()
        finally:
            with self._lock:
                if self._queue is queue:
                    self._queue = None


def _on_loop() -> bool:
    """Whether this thread runs an event loop (which the answer would need: never wait)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
