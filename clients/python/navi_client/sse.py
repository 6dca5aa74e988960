"""Server-Sent Events, read the same way by the sync and the async client: lines in, frames
out (`SSEDecoder`), and a streamed exec's frames mapped onto the client's models
(`exec_item`). Only the reading loop differs between the two clients."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NoReturn

from navi_client.errors import NaviClientError, api_error
from navi_client.models import Event, ExecChunk
from navi_client.wire import ExecOut

_EXEC_FIELDS = ("ok", "exit_code", "stdout", "stderr", "timed_out", "oom_killed", "truncated",
                "duration_ms", "audit_seq", "timeout_s", "runtime")


@dataclass
class SSEDecoder:
    """Feed it lines (without their newline); a blank line ends a frame, which `feed`
    returns as `(id, data)`. Comments (keep-alives) and unknown fields are skipped."""

    _id: int | None = None
    _data: list[str] = field(default_factory=list)

    def feed(self, line: str) -> tuple[int | None, dict[str, Any]] | None:
        if line == "":
            frame_id, data = self._id, self._data
            self._id, self._data = None, []
            if not data:
                return None
            try:
                value = json.loads("\n".join(data))
            except ValueError as exc:
                raise NaviClientError(f"an event that is not JSON: {data[0][:100]!r}") from exc
            return frame_id, value if isinstance(value, dict) else {"type": "unknown"}
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "id" and value.isascii() and value.isdigit():
            self._id = int(value)
        return None


def event_of(frame_id: int | None, data: dict[str, Any]) -> Event:
    if data.get("id") is None and frame_id is not None:
        data = {**data, "id": frame_id}
    return Event.model_validate(data)


def exec_item(data: dict[str, Any]) -> ExecChunk | ExecOut | None:
    """A streamed exec's frame as output (`ExecChunk`), its result (`ExecOut`), or None (the
    `tool_call` that opens it); an `error` frame raises the API's exception."""
    kind = data.get("type")
    if kind == "exec_output":
        return ExecChunk.model_validate(
            {k: data.get(k) for k in ("exec_id", "stream", "data")})
    if kind == "error":
        _raise(data)
    if kind != "tool_result" or data.get("code") is not None:
        return None  # a refused call's result: the `error` frame with its status follows
    said = {"output": data.get("output") or None, "error": data.get("error"),
            "exec_id": data.get("exec_id")}
    if data.get("ok") is not None:  # a sandboxed run: its fields, flat in the event
        return ExecOut.model_validate({**{k: data.get(k) for k in _EXEC_FIELDS}, **said})
    return ExecOut(ok=bool(data.get("success")), exit_code=None, stdout=data.get("output") or "",
                   stderr=data.get("error") or "", timed_out=False, oom_killed=False,
                   truncated=False, duration_ms=0, audit_seq=None, **said)


def _raise(data: dict[str, Any]) -> NoReturn:
    status = data.get("status")
    fields = {k: v for k, v in data.items() if k != "type"}
    raise api_error(status if isinstance(status, int) else 500, fields)


def ended_early() -> NaviClientError:
    return NaviClientError("the exec stream ended before its result")
