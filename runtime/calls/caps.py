"""Size caps for what a tool call's events carry (kept in the session's replay, sent to every
watcher): text is cut head + tail with a marker saying how much was left out."""

from __future__ import annotations

EVENT_TEXT = 64 * 1024   # tool output, stdout, stderr in a `tool_result` event
EVENT_ERROR = 4096       # a `tool_result`'s error


def clip(text: str, limit: int) -> str:
    """`text` if it fits, else its head and tail around `[... N characters cut ...]`."""
    if len(text) <= limit:
        return text
    marker = f"\n[... {len(text) - limit} characters cut ...]\n"
    keep = max(0, limit - len(marker))
    head = keep * 2 // 3
    return text[:head] + marker + text[len(text) - (keep - head):]
