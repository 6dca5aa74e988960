"""Turns a dead supervisor left half-way get an ending, at the next start.

A turn runs in the supervisor's memory; its rows are stored as it goes, and every turn that
ends stores a last `assistant` row whose `meta` names a `stop_reason` (or an `error`). A
supervisor killed mid-turn (`kill -9`, power loss) never writes that row, so the
conversation would show a turn that seems to run forever. At start-up, holding the audit
instance lock (so no other supervisor serves this data dir), every turn without an ending
gets one: an `assistant` row with `meta.stop_reason = "interrupted"` and a one-line reason,
which `GET /v1/sessions/{id}/messages` returns like any other ending and the web client can
show. Its execution, if one was running, is closed in the audit log as `interrupted` by the
audit store's own start-up reconcile.
"""

from __future__ import annotations

import json
import time

from runtime.logging import get_logger
from runtime.store import Store

log = get_logger(__name__)

INTERRUPTED_TEXT = "(interrupted: the server stopped during this turn)"

_LAST_ROWS = """
SELECT m.session_id, m.turn_id, m.role, m.meta FROM messages AS m
JOIN (SELECT turn_id, max(id) AS id FROM messages WHERE role != 'summary' GROUP BY turn_id)
  AS last ON m.id = last.id
"""


def _ended(role: str, meta_text: str | None) -> bool:
    if role != "assistant" or not meta_text:
        return False
    try:
        meta = json.loads(meta_text)
    except ValueError:
        return False
    return isinstance(meta, dict) and ("stop_reason" in meta or "error" in meta)


async def close_interrupted_turns(store: Store) -> int:
    """Store an `interrupted` ending for every turn that has none; returns how many."""
    async with store.connection.execute(_LAST_ROWS) as cur:
        rows = await cur.fetchall()
    open_turns = [(r[0], r[1]) for r in rows if not _ended(r[2], r[3])]
    if not open_turns:
        return 0
    meta = json.dumps({"stop_reason": "interrupted",
                       "message": "the server stopped during this turn"})
    async with store.transaction() as db:
        for session_id, turn_id in open_turns:
            await db.execute(
                "INSERT INTO messages (session_id, turn_id, role, content, meta, created_at) "
                "VALUES (?, ?, 'assistant', ?, ?, ?)",
                (session_id, turn_id, INTERRUPTED_TEXT, meta, time.time()))
    log.warning("turns_interrupted_closed", count=len(open_turns))
    return len(open_turns)
