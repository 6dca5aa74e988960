"""A tiny SSE reader for tests: frames from an httpx streaming response."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx


def frames(resp: httpx.Response) -> Iterator[tuple[int | None, dict[str, Any]]]:
    """Yield (id, data) per SSE frame; comments (keep-alives) are skipped."""
    event_id: int | None = None
    data: list[str] = []
    for line in resp.iter_lines():
        if line.startswith(":"):
            continue
        if line == "":
            if data:
                yield event_id, json.loads("\n".join(data))
            event_id, data = None, []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif line.startswith("id:"):
            event_id = int(line[3:].strip())
