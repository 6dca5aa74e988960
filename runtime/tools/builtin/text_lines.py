"""Numbered lines, as `filesystem read` (with a range) and `edit_file` show text."""

from __future__ import annotations


def numbered(lines: list[str], first: int) -> str:
    """`lines` (without their newlines) numbered from `first`, right-aligned, tab, text."""
    width = len(str(first + len(lines) - 1)) if lines else 1
    return "\n".join(f"{n:>{width}}\t{line}" for n, line in enumerate(lines, first))


def line_range(text: str, offset: int, limit: int) -> tuple[str, str]:
    """Lines `offset` .. `offset + limit - 1` (1-based) of `text`, numbered, and a footer
    saying where they sit in the file."""
    lines = text.splitlines()
    total = len(lines)
    if offset > max(total, 1):
        return "", f"(the file has {total} lines; offset {offset} is past its end)"
    chosen = lines[offset - 1: offset - 1 + limit]
    last = offset + len(chosen) - 1
    more = f"; more from offset={last + 1}" if last < total else ""
    return numbered(chosen, offset), f"(lines {offset}-{last} of {total}{more})"
