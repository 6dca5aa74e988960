"""Live output of a sandboxed run as `exec_output` events on a session's bus.

Output arrives in byte chunks that may split a UTF-8 character; an incremental decoder per
stream keeps text intact.
"""

from __future__ import annotations

import codecs

from runtime.events import ExecOutput, SessionEventBus
from runtime.sandbox.models import OutputChunk


class LiveOutput:
    """Publishes a run's output on the session bus, decoding UTF-8 across chunk boundaries."""

    def __init__(self, bus: SessionEventBus, exec_id: str) -> None:
        self.bus = bus
        self.exec_id = exec_id
        self._decoders = {s: codecs.getincrementaldecoder("utf-8")("replace")
                          for s in ("stdout", "stderr")}

    async def __call__(self, chunk: OutputChunk) -> None:
        text = self._decoders[chunk.stream].decode(chunk.data)
        if text:
            self.bus.publish(ExecOutput(exec_id=self.exec_id, stream=chunk.stream, data=text))
