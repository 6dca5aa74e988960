"""What of a tool call's arguments an event may carry: all of them up to 64 KiB, else a digest.

A `tool_call` event is kept in the session's replay buffer and sent to every watcher, so the
arguments it carries must be bounded whatever a caller sent (an exec body may hold 32 MiB).
Arguments whose encoding fits `ARGS_EVENT_BYTES` travel as they are; larger ones are replaced
by `TruncatedArgs`: their size and SHA-256, so a client holding the request can tell it is
the same one. The encoding is canonical JSON (`args_bytes`), the one a client reproduces with
``json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()``.

Shared by `POST /v1/sessions/{id}/exec` and the agent loop; the work is linear in the size
of the arguments, so callers holding large ones run it in a thread.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ARGS_EVENT_BYTES = 64 * 1024


class TruncatedArgs(BaseModel):
    """The `args` of an event whose arguments were larger than `ARGS_EVENT_BYTES`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    truncated: Literal[True] = True
    size: int = Field(ge=0, description="bytes of the arguments' canonical JSON")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="hex SHA-256 of those bytes")


def args_bytes(args: Any) -> bytes:
    """The canonical JSON encoding of a call's arguments (keys sorted, compact, UTF-8)."""
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str).encode("utf-8", "surrogatepass")


def event_args(args: Any, limit: int = ARGS_EVENT_BYTES) -> Any:
    """`args` themselves when their encoding fits `limit`, else their `TruncatedArgs` (as JSON)."""
    encoded = args_bytes(args)
    if len(encoded) <= limit:
        return args
    digest = TruncatedArgs(size=len(encoded), sha256=hashlib.sha256(encoded).hexdigest())
    return digest.model_dump()
