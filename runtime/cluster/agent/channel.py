"""The node agent's exec channel: calls without a Ray task each (`runtime.nodes.channel_wire`).

Why: a Ray actor call and its streaming generator cost ≈ 5 ms of a quick call's hop. The
agent listens on its node's address (the one Ray knows it by) at `NAVI_NODE_CHANNEL_PORT`
(0: off); its control plane keeps one connection open and sends each call's `RunOnNode`
JSON, its gate's word and its cancel, multiplexed by call id. A client that does not
prove the cluster's token is closed before a frame of it is read. A call is served by the
same generator as the agent's Ray method `run` (`NodeAgent.run`); a cancel, or the
connection's end, closes it, which kills the call as closing the Ray stream does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import AsyncGenerator, Callable

from runtime.logging import get_logger
from runtime.nodes.channel_wire import (
    BATCH,
    END,
    FAILED,
    GATE,
    RUN,
    TO_NODE,
    Batch,
    ChannelError,
    FailedWord,
    GateWord,
    frame,
    prove_as_server,
    read_frame,
    read_token,
)
from runtime.nodes.failures import Failed
from runtime.sandbox.models import ExecResult, OutputChunk

log = get_logger(__name__)
Items = AsyncGenerator[list[OutputChunk | ExecResult] | Failed, None]


def node_token() -> bytes | None:
    """The cluster's token as this node's Ray was given it (`RAY_AUTH_TOKEN_PATH`)."""
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if not path:
        return None
    try:
        return read_token(path)
    except (OSError, ChannelError):
        return None


def node_address() -> str:
    import ray

    return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]


class NodeChannel:
    """`run(payload)`: a call's batches (`NodeAgent.run`); `gate(exec_id, durable)`: its
    start gate's word (`Gates.open`)."""

    def __init__(self, token: bytes, run: Callable[[bytes], Items],
                 gate: Callable[[str, bool], None]) -> None:
        self._token = token
        self._run = run
        self._gate = gate
        self._server: asyncio.Server | None = None
        self._peers: set[asyncio.StreamWriter] = set()
        self.calls = 0  # calls taken over the channel (tests read it)

    async def start(self, host: str, port: int) -> str:
        self._server = await asyncio.start_server(self._serve, host, port,
                                                  limit=64 * 1024)
        return f"{host}:{self._server.sockets[0].getsockname()[1]}"

    def drop_peers(self) -> int:
        """Close every connection (their calls are killed); the control plane reconnects."""
        peers = list(self._peers)
        for writer in peers:
            writer.close()
        return len(peers)

    async def close(self) -> None:
        self.drop_peers()
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await prove_as_server(reader, writer, self._token)
        except (ChannelError, OSError, EOFError, TimeoutError):
            log.warning("node_channel_refused", peer=str(writer.get_extra_info("peername")))
            writer.close()
            return
        self._peers.add(writer)
        calls: dict[int, asyncio.Task[None]] = {}
        try:
            while True:
                kind, call, payload = await read_frame(reader, TO_NODE)
                if kind == RUN:
                    if call in calls:
                        raise ChannelError("a call id in use")
                    self.calls += 1
                    task = calls[call] = asyncio.create_task(self._one(writer, call, payload))
                    task.add_done_callback(functools.partial(_forget, calls, call))
                elif kind == GATE:
                    word = GateWord.model_validate_json(payload)
                    self._gate(word.exec_id, word.durable)
                elif (running := calls.get(call)) is not None:  # CANCEL
                    running.cancel()
        except (ChannelError, OSError, EOFError, ValueError):
            pass  # the end, or a peer that broke the protocol: its calls end with it
        finally:
            self._peers.discard(writer)
            writer.close()
            for task in list(calls.values()):
                task.cancel()

    async def _one(self, writer: asyncio.StreamWriter, call: int, payload: bytes) -> None:
        """One call: its batches, a `Failed`, or the end without a result."""
        async with contextlib.aclosing(self._run(payload)) as items:
            async for item in items:
                if isinstance(item, Failed):
                    await _send(writer, FAILED, call, _failed(item))
                    return
                try:
                    reply = frame(BATCH, call, Batch.of(item).model_dump_json().encode())
                except ChannelError:  # the control plane sends such calls by Ray
                    await _send(writer, FAILED, call, _failed(Failed(
                        "SandboxError", "the call's output is too large for the channel")))
                    return
                await _send(writer, None, call, reply)
                if item and isinstance(item[-1], ExecResult):
                    return
        await _send(writer, END, call)


def _forget(calls: dict[int, asyncio.Task[None]], call: int, _: object) -> None:
    calls.pop(call, None)


async def _send(writer: asyncio.StreamWriter, kind: bytes | None, call: int,
                payload: bytes = b"") -> None:
    """One frame (`kind` None: `payload` is one already), written at once: frames never
    interleave."""
    if writer.is_closing():
        return
    writer.write(payload if kind is None else frame(kind, call, payload))
    with contextlib.suppress(ConnectionError):
        await writer.drain()


def _failed(failed: Failed) -> bytes:
    try:
        return FailedWord(kind=failed.kind, message=failed.message,
                          details=failed.details).model_dump_json().encode()
    except ValueError:  # details that are not JSON: the error without them
        return FailedWord(kind=failed.kind, message=failed.message).model_dump_json().encode()


async def open_channel(port: int, run: Callable[[bytes], Items],
                       gate: Callable[[str, bool], None]) -> tuple[NodeChannel | None, str]:
    """The channel on the node's address (`port` 0, no token, a port taken: none, and
    calls come by Ray) and the `host:port` the control plane is told."""
    token = node_token()
    if not port or token is None:
        return None, ""
    channel = NodeChannel(token, run, gate)
    try:
        host = await asyncio.to_thread(node_address)
        return channel, await channel.start(host, port)
    except OSError as exc:
        log.warning("node_channel_not_opened", port=port, error=str(exc))
        return None, ""
