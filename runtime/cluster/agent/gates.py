"""Start gates of gated calls on a node, by exec id.

A gated call's container is prepared and nothing runs in it until the control plane says its
audit intent is durable (`open(exec_id, True)`), or could not be written (`False`: the call
runs nothing). The gate is made by whichever comes first: the call or that word.
"""

from __future__ import annotations

import asyncio

from runtime.errors import AuditUnavailable

KEPT_S = 60.0  # a word whose call never came is dropped after this


class Gates:
    def __init__(self) -> None:
        self._gates: dict[str, asyncio.Future[None]] = {}

    def get(self, exec_id: str) -> asyncio.Future[None]:
        gate = self._gates.get(exec_id)
        if gate is None:
            gate = self._gates[exec_id] = asyncio.get_running_loop().create_future()
            gate.add_done_callback(lambda f: f.exception() if not f.cancelled() else None)
        return gate

    def drop(self, exec_id: str) -> None:
        self._gates.pop(exec_id, None)

    def open(self, exec_id: str, durable: bool) -> None:
        gate = self.get(exec_id)
        if not gate.done():
            if durable:
                gate.set_result(None)
            else:
                gate.set_exception(AuditUnavailable("the call's audit intent was not written"))
        asyncio.get_running_loop().call_later(KEPT_S, self.drop, exec_id)
