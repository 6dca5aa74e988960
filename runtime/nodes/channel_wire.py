"""The exec channel's wire: frames, the mutual token proof, and the replies' JSON.

Why: a call on a cluster node went out as a Ray task and came back through Ray's streaming
generator, ≈ 5 ms of the hop. The node agent also listens on a TCP port of its node's
address (`NAVI_NODE_CHANNEL_PORT`) and the control plane keeps one connection per node
open, calls multiplexed on it by id (`runtime.cluster.agent.channel`,
`runtime.cluster.control.channel`).

Before anything else each side proves it holds the cluster's token: the client sends a
fresh nonce, the server its own and HMAC-SHA256(token, "server" + both nonces), the client
checks it and answers HMAC-SHA256(token, "client" + both nonces); each MAC is checked with
`hmac.compare_digest`, and a peer that fails is closed before a frame of it is read. Then
frames: a header (payload length, kind, call id) and at most `MAX_FRAME` bytes of payload;
an unknown kind or a longer frame closes the connection. Payloads are JSON of pydantic
models (a call's request is `RunOnNode`, validated by the node as over Ray); nothing is
unpickled.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import struct
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from runtime.nodes.failures import Failed
from runtime.sandbox.models import SAFE_ID_PATTERN, ExecResult, OutputChunk

MAX_FRAME = 16 * 1024 * 1024  # a call with its tool objects, or a batch of output
HEADER = struct.Struct(">IcQ")  # payload length, kind, call id
NONCE = 32
PROOF_S = 5.0  # a peer that has not proved itself by then is closed
# control plane -> node: a call, its gate's word, its end; node -> control plane: a batch of
# output (with the result last), a Failed, the end of a call that gave no result
RUN, GATE, CANCEL, BATCH, FAILED, END = b"R", b"G", b"C", b"B", b"F", b"E"
TO_NODE = frozenset({RUN, GATE, CANCEL})
TO_CONTROL = frozenset({BATCH, FAILED, END})


class ChannelError(ConnectionError):
    """The peer did not prove the token, or sent a frame that is not one."""


def read_token(path: Path | str) -> bytes:
    token = Path(path).read_bytes().strip()
    if not token:
        raise ChannelError(f"{path} is empty")
    return token


def _mac(token: bytes, role: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(token, role + first + second, hashlib.sha256).digest()


async def prove_as_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          token: bytes) -> None:
    """The node's side of the proof; `ChannelError` (or a timeout) if the client fails."""
    async with asyncio.timeout(PROOF_S):
        theirs = await reader.readexactly(NONCE)
        mine = os.urandom(NONCE)
        writer.write(mine + _mac(token, b"navi-channel-server", theirs, mine))
        await writer.drain()
        answer = await reader.readexactly(hashlib.sha256().digest_size)
    if not hmac.compare_digest(answer, _mac(token, b"navi-channel-client", theirs, mine)):
        raise ChannelError("the peer does not hold the cluster's token")


async def prove_as_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          token: bytes) -> None:
    """The control plane's side of the proof; `ChannelError` if the node fails it."""
    async with asyncio.timeout(PROOF_S):
        mine = os.urandom(NONCE)
        writer.write(mine)
        await writer.drain()
        theirs = await reader.readexactly(NONCE)
        proof = await reader.readexactly(hashlib.sha256().digest_size)
        if not hmac.compare_digest(proof, _mac(token, b"navi-channel-server", mine, theirs)):
            raise ChannelError("the node does not hold the cluster's token")
        writer.write(_mac(token, b"navi-channel-client", mine, theirs))
        await writer.drain()


def frame(kind: bytes, call: int, payload: bytes = b"") -> bytes:
    if len(payload) > MAX_FRAME:
        raise ChannelError(f"a frame is at most {MAX_FRAME} bytes")
    return HEADER.pack(len(payload), kind, call) + payload


async def read_frame(reader: asyncio.StreamReader, kinds: frozenset[bytes]
                     ) -> tuple[bytes, int, bytes]:
    """The next frame (`IncompleteReadError` at the end); one of another kind or longer
    than `MAX_FRAME` is a `ChannelError`, its payload never read."""
    size, kind, call = HEADER.unpack(await reader.readexactly(HEADER.size))
    if kind not in kinds or size > MAX_FRAME:
        raise ChannelError("malformed frame")
    return kind, call, await reader.readexactly(size)


class _Json(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_bytes="base64",
                              val_json_bytes="base64")


class GateWord(_Json):
    """`NodeAgent.open_gate`'s arguments."""

    exec_id: str = Field(pattern=SAFE_ID_PATTERN)
    durable: bool


class _Chunk(_Json):
    kind: Literal["chunk"] = "chunk"
    stream: Literal["stdout", "stderr"]
    data: bytes


class _Result(_Json):
    kind: Literal["result"] = "result"
    result: ExecResult  # its stdout and stderr travel beside it (base64)
    stdout: bytes
    stderr: bytes


class Batch(_Json):
    items: list[Annotated[_Chunk | _Result, Field(discriminator="kind")]]

    @classmethod
    def of(cls, items: list[OutputChunk | ExecResult]) -> Batch:
        return cls(items=[
            _Chunk(stream=i.stream, data=i.data) if isinstance(i, OutputChunk)
            else _Result(result=i.model_copy(update={"stdout": b"", "stderr": b""}),
                         stdout=i.stdout, stderr=i.stderr)
            for i in items])

    def unpacked(self) -> list[OutputChunk | ExecResult]:
        return [OutputChunk(stream=i.stream, data=i.data) if isinstance(i, _Chunk)
                else i.result.model_copy(update={"stdout": i.stdout, "stderr": i.stderr})
                for i in self.items]


class FailedWord(_Json):
    kind: str = Field(max_length=64)
    message: str
    details: dict[str, Any] = Field(default_factory=dict)

    def failed(self) -> Failed:
        return Failed(self.kind, self.message, self.details)
