"""A node agent's session ports: the relay broker on the node, byte streams over the hop.

Why here: a process on a node declares its ports there; its relay (`runtime.ports.navi_ports`)
connects out to a unix socket of the node's own `PortsHub` (under the node's data dir, never
seen by the control plane), exactly as on one machine. The control plane reaches a port only
by asking this agent (`open`: a stream of the bytes the program sends, `send`: the bytes for
it), over Ray, which admits only holders of the cluster's token; nothing is published on the
node and no path crosses. The session's later calls on this node get the relay's listeners
(`PortsHub.for_call`) as on one machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from runtime.errors import NotFound
from runtime.nodes.failures import Failed, packed
from runtime.nodes.process_wire import PortOpen
from runtime.nodes.wire import parsed
from runtime.ports.hub import PortsHub

READ = 64 * 1024


class NodePorts:
    def __init__(self, root: Path) -> None:
        self.hub = PortsHub(root)
        self._writers: dict[str, asyncio.StreamWriter] = {}

    async def open(self, payload: bytes) -> AsyncIterator[Any]:
        """Streaming: a handle for `send`, then the program's bytes; b"" at its EOF."""
        try:
            want = parsed(PortOpen, payload)
            reader, writer = await self.hub.open(want.session, want.port)
        except Exception as exc:
            yield packed(exc)
            return
        handle = uuid.uuid4().hex
        self._writers[handle] = writer
        try:
            yield handle
            while data := await reader.read(READ):
                yield data
            yield b""
        finally:
            self._writers.pop(handle, None)
            writer.close()

    async def send(self, handle: str, data: bytes) -> None | Failed:
        """Bytes for the program (b"": the control plane's side ended)."""
        writer = self._writers.get(handle) if isinstance(handle, str) else None
        if writer is None or not isinstance(data, bytes):
            return Failed("NotFound", "no such port stream")
        try:
            if not data:
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return None
            writer.write(data)
            await writer.drain()
        except Exception as exc:
            return packed(NotFound(f"the port stream ended ({type(exc).__name__})"))
        return None

    async def close(self) -> None:
        await self.hub.close()
