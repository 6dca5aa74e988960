"""Validation of workspace-relative paths given by clients, tools and the agent.

Pure string checks, done before any system call. The file-system walk (``runtime.workspace.fs``)
refuses symlinks and escapes on its own; this layer rejects everything that is not a plain
relative path with a clear message, so that callers learn what is wrong instead of receiving
``ENOENT`` for ``../../etc/passwd``.

The API layer URL-decodes once; a path that still carries ``%2e``/``%2f``-style escapes after
that was double-encoded and is refused (any ``%`` followed by two hex digits).
"""

from __future__ import annotations

import re
import unicodedata

from runtime.errors import InvalidPath

MAX_PATH_BYTES = 1024
MAX_COMPONENT_BYTES = 255
MAX_DEPTH = 32
# Components with this prefix are the atomic writer's temporary files: never addressable.
RESERVED_PREFIX = ".navi-tmp-"

_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _refuse(reason: str) -> InvalidPath:
    return InvalidPath(f"invalid path: {reason}")


def _split(path: str, allow_root: bool) -> tuple[str, ...]:
    if "\x00" in path:
        raise _refuse("contains a NUL byte")
    if _CONTROL.search(path):
        raise _refuse("contains control characters")
    if "\\" in path:
        raise _refuse("backslashes are not allowed")
    if _PERCENT_ESCAPE.search(path):
        raise _refuse("percent-encoded characters after decoding (double encoding?)")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        raise _refuse("not valid UTF-8") from None
    if size > MAX_PATH_BYTES:
        raise _refuse(f"longer than {MAX_PATH_BYTES} bytes")
    if path.startswith("/"):
        raise _refuse("absolute paths are not allowed")
    body = path[:-1] if path.endswith("/") else path  # tolerate one trailing slash: "dir/"
    if body == "":
        if allow_root:
            return ()
        raise _refuse("empty")
    parts = tuple(body.split("/"))
    if len(parts) > MAX_DEPTH:
        raise _refuse(f"more than {MAX_DEPTH} components")
    for part in parts:
        if part == "":
            raise _refuse("empty component ('//')")
        if part in (".", ".."):
            raise _refuse("'.' and '..' components are not allowed")
        if len(part.encode("utf-8")) > MAX_COMPONENT_BYTES:
            raise _refuse(f"a component is longer than {MAX_COMPONENT_BYTES} bytes")
        if part.startswith(RESERVED_PREFIX):
            raise _refuse(f"names starting with {RESERVED_PREFIX!r} are reserved")
    return parts


def split_path(path: object, *, allow_root: bool = False) -> tuple[str, ...]:
    """Validate a workspace-relative path and return its components.

    ``allow_root`` accepts ``""`` (the workspace itself, e.g. for listings) as ``()``.
    Raises ``InvalidPath`` with a short reason; the reason never contains host paths.
    """
    if not isinstance(path, str):
        raise _refuse("must be text")
    parts = _split(path, allow_root)
    # Unicode look-alikes ("\uff0e\uff0e/", "\u2025") must not become '..' in any later
    # normalising layer (a client, an archive tool, another file system).
    folded = unicodedata.normalize("NFKC", path)
    if folded != path:
        try:
            _split(folded, allow_root)
        except InvalidPath:
            raise _refuse("normalises (NFKC) to an unsafe path") from None
    return parts


def join_parts(parts: tuple[str, ...]) -> str:
    return "/".join(parts)


def is_listable_name(name: str) -> bool:
    """Whether a directory entry found on disk can be shown (and later addressed) by clients."""
    try:
        return len(split_path(name)) == 1
    except InvalidPath:
        return False
