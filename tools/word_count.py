"""Shipped example user tool: count lines, words and characters of a text or a session file."""

name = "word_count"
description = (
    "Count lines, words and characters of a text, or of a text file in the session "
    "workspace (give exactly one of text or path)."
)
parameters = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "text to count"},
        "path": {"type": "string", "description": "workspace-relative path of a text file"},
    },
    "additionalProperties": False,
}


async def execute(params):
    text = params.get("text")
    path = params.get("path")
    if (text is None) == (path is None):
        raise ValueError("give exactly one of 'text' or 'path'")
    if path is not None:
        if path.startswith("/") or ".." in path.split("/"):
            raise ValueError("path must be relative to the workspace")
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    return f"lines={lines} words={len(text.split())} chars={len(text)}"
