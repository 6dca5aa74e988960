"""The exec channel between a control plane and a node agent, on loopback: the agent's
server (`runtime.cluster.agent.channel.NodeChannel`) and the control plane's client
(`runtime.cluster.control.channel.NodeChannel`), both real; the work a call does is a small
generator standing in for `NodeAgent.run` (which needs an engine)."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from runtime.cluster.agent.channel import NodeChannel as Server
from runtime.cluster.control.channel import DROPPED
from runtime.cluster.control.channel import NodeChannel as Client
from runtime.nodes.channel_wire import (
    BATCH,
    FAILED,
    GATE,
    HEADER,
    MAX_FRAME,
    NONCE,
    RUN,
    Batch,
    FailedWord,
    frame,
    prove_as_client,
)
from runtime.nodes.failures import Failed
from runtime.sandbox.models import ExecResult, OutputChunk

TOKEN = b"a" * 64


class Node:
    """A channel server whose calls echo their request and record what happened."""

    def __init__(self, token: bytes = TOKEN) -> None:
        self.requests: list[bytes] = []
        self.gates: list[tuple[str, bool]] = []
        self.closed: list[bytes] = []
        self.hold = asyncio.Event()
        self.server = Server(token, self.run, lambda e, d: self.gates.append((e, d)))

    async def run(self, payload: bytes) -> AsyncGenerator[list[OutputChunk | ExecResult] | Failed,
                                                          None]:
        self.requests.append(payload)
        try:
            if payload == b"fail":
                yield Failed("NotFound", "no such thing", {"retry_after": 2})
                return
            yield [OutputChunk(stream="stdout", data=b"\xff\x00 out")]
            if payload == b"hold":
                await self.hold.wait()
            yield [ExecResult(exec_id="e1", exit_code=0, stdout=b"\xfe" + payload, stderr=b"",
                              duration_ms=3)]
        finally:
            self.closed.append(payload)

    async def start(self) -> str:
        return await self.server.start("127.0.0.1", 0)


def go(test: Any) -> None:
    asyncio.run(asyncio.wait_for(test(), 20))


async def replies(on: Any) -> list[Any]:
    out: list[Any] = []
    while True:
        kind, payload = await on.next()
        if kind == BATCH:
            out += Batch.model_validate_json(payload).unpacked()
            if isinstance(out[-1], ExecResult):
                return out
        else:
            return [*out, (kind, payload)]


def test_a_call_goes_out_and_its_output_and_result_come_back() -> None:
    async def test() -> None:
        node = Node()
        client = Client("n1", await node.start(), TOKEN)
        first, second = await client.call(b"one"), await client.call(b"two")
        assert first is not None and second is not None and first.id != second.id
        got = await replies(first)
        assert got[0] == OutputChunk(stream="stdout", data=b"\xff\x00 out")
        assert got[-1].stdout == b"\xfeone" and got[-1].exit_code == 0
        assert (await replies(second))[-1].stdout == b"\xfetwo"
        second.gate("e-2", True)
        failing = await client.call(b"fail")
        assert failing is not None
        kind, payload = (await replies(failing))[-1]
        assert kind == FAILED and FailedWord.model_validate_json(payload).failed() == Failed(
            "NotFound", "no such thing", {"retry_after": 2})
        assert node.server.calls == 3 and node.gates == [("e-2", True)]
        await client.close()
        await node.server.close()

    go(test)


def test_a_peer_without_the_token_is_closed_before_any_request_is_read() -> None:
    """Red if the server skips or weakens its check of the client's proof."""
    async def test() -> None:
        node = Node()
        host, _, port = (await node.start()).rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(os.urandom(NONCE))
        await reader.readexactly(NONCE + 32)  # the server's nonce and proof
        writer.write(hashlib.sha256(b"a guess").digest())  # a proof without the token
        writer.write(frame(RUN, 1, b"one") + frame(GATE, 1, b'{"exec_id":"e","durable":true}'))
        await writer.drain()
        assert await reader.read() == b""  # closed, nothing answered
        writer.close()
        await asyncio.sleep(0.1)
        assert node.requests == [] and node.gates == [] and node.server.calls == 0
        # the control plane's own client with another token: no channel (calls go by Ray)
        assert await Client("n1", f"{host}:{port}", b"b" * 64).call(b"one") is None
        assert node.requests == []
        await node.server.close()

    go(test)


def test_the_client_refuses_a_node_without_the_token() -> None:
    async def test() -> None:
        node = Node(token=b"c" * 64)
        client = Client("n1", await node.start(), TOKEN)
        assert await client.call(b"one") is None
        assert node.requests == []
        await node.server.close()

    go(test)


@pytest.mark.parametrize("bad", [
    HEADER.pack(MAX_FRAME + 1, RUN, 1),  # longer than a frame may be
    HEADER.pack(3, b"X", 1) + b"one",  # a kind the node does not take
    frame(GATE, 1, b"not json"),  # a gate word that is not one
], ids=["too-long", "unknown-kind", "gate-not-json"])
def test_a_malformed_frame_closes_the_connection(bad: bytes) -> None:
    async def test() -> None:
        node = Node()
        host, _, port = (await node.start()).rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        await prove_as_client(reader, writer, TOKEN)
        writer.write(bad + frame(RUN, 2, b"two"))
        await writer.drain()
        assert await reader.read() == b""
        writer.close()
        await asyncio.sleep(0.1)
        assert node.requests == []
        await node.server.close()

    go(test)


def test_cancel_and_a_dropped_connection_end_the_call_on_the_node_and_the_next_call_connects(
) -> None:
    async def test() -> None:
        node = Node()
        client = Client("n1", await node.start(), TOKEN)
        held = await client.call(b"hold")
        assert held is not None
        assert (await held.next())[0] == BATCH  # running: its first output came
        held.cancel()
        for _ in range(50):
            if node.closed:
                break
            await asyncio.sleep(0.02)
        assert node.closed == [b"hold"]  # the node's call was closed (killed there)

        held = await client.call(b"hold")
        assert held is not None and (await held.next())[0] == BATCH
        assert node.server.drop_peers() == 1
        assert (await held.next())[0] == DROPPED  # the control plane learns it
        await asyncio.sleep(0.1)
        assert node.closed == [b"hold", b"hold"]  # and the node killed the call
        again = await client.call(b"three")  # a new connection
        assert again is not None and (await replies(again))[-1].stdout == b"\xfethree"
        await client.close()
        await node.server.close()

    go(test)
