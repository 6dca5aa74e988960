"""Crash recovery: an intent whose process ended before its outcome gets ``interrupted``.

Run at open, under ``AuditLog``'s lock. An intent with no ``outcome``/``interrupted`` record
is closed only when its instance's lock is free (``runtime.audit.instances``): a live
instance's in-flight executions are never touched, and intents of our own instance id are
from an earlier run (we hold that lock ourselves), so they are closed too. The chain then
tells what was cut short.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiosqlite

from runtime.audit.instances import instance_alive
from runtime.audit.records import AuditEntry, AuditRecord

__all__ = ["interrupted_entries"]
_OPEN_INTENTS = """
SELECT body FROM audit AS a WHERE a.kind = 'intent' AND NOT EXISTS (
    SELECT 1 FROM audit AS b WHERE b.exec_id = a.exec_id AND b.kind IN ('outcome', 'interrupted')
) ORDER BY a.seq
"""


async def interrupted_entries(
    db: aiosqlite.Connection, data_dir: Path, own_instance: str,
) -> list[AuditEntry]:
    """The ``interrupted`` records to append for intents whose instance has ended."""
    async with db.execute(_OPEN_INTENTS) as cur:
        bodies = [row[0] for row in await cur.fetchall()]
    closes = []
    for body in bodies:
        intent = AuditRecord.from_body(body)
        if intent.instance != own_instance and await asyncio.to_thread(
                instance_alive, data_dir, intent.instance):
            continue
        closes.append(_interrupted(intent))
    return closes


def _interrupted(intent: AuditRecord) -> AuditEntry:
    return AuditEntry(
        kind="interrupted", tenant=intent.tenant, user=intent.user, session=intent.session,
        exec_id=intent.exec_id, tool=intent.tool, decision=intent.decision, rule=intent.rule,
        image=intent.image, limits=intent.limits,
        detail=f"no outcome recorded for intent seq {intent.seq} "
               f"(instance {intent.instance} ended)",
    )
