"""Where a new session lives: a pure choice over the nodes the control plane knows.

Live nodes only; the one with the fewest sessions; ties go to the lowest node id in natural
order (n2 before n10), so the same state always gives the same node. The caller holds its
placement lock and counts the sessions it has just placed, so two sessions made at once
do not both land on the same "emptiest" node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    id: str
    alive: bool
    sessions: int


def natural_key(node_id: str) -> tuple[tuple[int, int | str], ...]:
    """n2 < n10: digit runs compare as numbers, the rest as text."""
    return tuple((0, int(part)) if part.isdigit() else (1, part)
                 for part in re.findall(r"\d+|\D+", node_id))


def place(nodes: Iterable[Candidate]) -> str | None:
    """The node a new session goes to; None when no node is alive."""
    live = [n for n in nodes if n.alive]
    if not live:
        return None
    return min(live, key=lambda n: (n.sessions, natural_key(n.id))).id
