"""A session's conversation in SQLite (`messages`, migration 2 of the store).

Rows: `user` (what was asked), `assistant` (what the model said, its thinking, the tool calls
it made, the usage), `tool` (one tool result, with exec_id and success in `meta`) and
`summary` (context compression: a summary of every earlier row, `meta.covers_until`).
Images a tool returned are not stored as text: the row keeps only their paths, the image
data goes to the model once, in the turn that produced it. Everything is size-capped.
"""

from __future__ import annotations

import builtins
import json
import secrets
import time
from typing import Any

from runtime.agent.caps import STORED_TEXT, STORED_THINKING, clip, clip_value
from runtime.store import Store
from runtime.wire import MessageOut, MessageRole

__all__ = ["MAX_LIST", "MAX_META_CHARS", "MessageRole", "MessageStore", "StoredMessage"]
MAX_META_CHARS = 16 * 1024
MAX_LIST = 1000


def new_turn_id() -> str:
    """A turn's id (a sub-agent's too): what its stored rows carry."""
    return "tu_" + secrets.token_hex(8)


class StoredMessage(MessageOut):
    """A row of ``messages``: the API's ``MessageOut`` itself (the route answers rows as they
    are), one definition for the store, the agent and the client."""


_COLUMNS = ("id, turn_id, role, content, thinking, tool_calls, tool_call_id, tool_name, meta, "
            "created_at")


def _row(row: Any) -> StoredMessage:
    data = dict(row)
    data["tool_calls"] = json.loads(data["tool_calls"]) if data["tool_calls"] else []
    data["meta"] = json.loads(data["meta"]) if data["meta"] else {}
    return StoredMessage(**data)


def _meta_json(meta: dict[str, Any] | None) -> str | None:
    if not meta:
        return None
    text = json.dumps(clip_value(meta, 2048), ensure_ascii=False, default=str)
    if len(text) > MAX_META_CHARS:
        text = json.dumps({"truncated": True})
    return text


class MessageStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def append(
        self, session_id: str, turn_id: str, role: MessageRole, content: str = "", *,
        thinking: str | None = None, tool_calls: list[dict[str, Any]] | None = None,
        tool_call_id: str | None = None, tool_name: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> int:
        calls = json.dumps(clip_value(tool_calls), ensure_ascii=False) if tool_calls else None
        async with self.store.connection.execute(
            "INSERT INTO messages (session_id, turn_id, role, content, thinking, tool_calls, "
            "tool_call_id, tool_name, meta, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (session_id, turn_id, role, clip(content, STORED_TEXT),
             clip(thinking, STORED_THINKING) if thinking else None, calls,
             tool_call_id[:200] if tool_call_id else None,
             tool_name[:200] if tool_name else None, _meta_json(meta), time.time()),
        ) as cur:
            return int(cur.lastrowid or 0)

    async def list(self, session_id: str, *, after: int = 0, limit: int = MAX_LIST
                   ) -> builtins.list[StoredMessage]:
        limit = max(1, min(limit, MAX_LIST))
        async with self.store.connection.execute(
            f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND id > ? "
            "ORDER BY id LIMIT ?", (session_id, after, limit),
        ) as cur:
            rows = await cur.fetchall()
        return [_row(r) for r in rows]

    async def context(self, session_id: str
                      ) -> tuple[StoredMessage | None, builtins.list[StoredMessage]]:
        """The newest summary (if any) and every conversation row after what it covers."""
        async with self.store.connection.execute(
            f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND role = 'summary' "
            "ORDER BY id DESC LIMIT 1", (session_id,),
        ) as cur:
            row = await cur.fetchone()
        summary = _row(row) if row is not None else None
        covered = int(summary.meta.get("covers_until", 0)) if summary else 0
        async with self.store.connection.execute(
            f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND id > ? "
            "AND role != 'summary' ORDER BY id", (session_id, covered),
        ) as cur:
            rows = await cur.fetchall()
        return summary, [_row(r) for r in rows]
