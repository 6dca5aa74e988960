"""Session titles: the one a session gets from its first message, and a rename's checks.

A title is untrusted text (a client shows it as text, never as HTML); it is one printable
line. The automatic one is the first message with its whitespace runs made single spaces,
cut to `AUTO_TITLE_CHARS` at a word boundary where one is near, with an ellipsis.
"""

from __future__ import annotations

from runtime.store.models import TITLE_MAX

AUTO_TITLE_CHARS = 60


def title_from_message(content: str) -> str | None:
    """The title a first message gives its session (None: nothing printable in it)."""
    text = " ".join("".join(c if c.isprintable() else " " for c in content).split())
    if not text:
        return None
    if len(text) <= AUTO_TITLE_CHARS:
        return text
    cut = text[:AUTO_TITLE_CHARS - 1]
    space = cut.rfind(" ")
    if space >= AUTO_TITLE_CHARS // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def checked_title(value: str) -> str:
    """A rename's title: stripped, 1..TITLE_MAX printable characters (else ValueError)."""
    title = value.strip()
    if not title:
        raise ValueError("a title cannot be empty")
    if len(title) > TITLE_MAX:
        raise ValueError(f"a title has at most {TITLE_MAX} characters")
    if not title.isprintable():
        raise ValueError("a title is one line of printable text (no control characters)")
    return title
