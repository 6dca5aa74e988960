"""Tool manuals (`manuals/<tool>.md`): one loader for `tool_manual` and `GET /v1/manuals/{name}`.

A manual name comes from a model or a client, so it is untrusted: it must match the tool-name
pattern (no dots, no slashes: no traversal), the file is opened relative to the manuals
directory without following symlinks, must be a regular file and is size-capped.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from runtime.config import PROJECT_ROOT
from runtime.errors import InvalidInput, NotFound
from runtime.tools.base import TOOL_NAME_PATTERN

DEFAULT_MANUALS_DIR = PROJECT_ROOT / "manuals"
MAX_MANUAL_BYTES = 256 * 1024
_NAME = re.compile(TOOL_NAME_PATTERN)


def check_manual_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidInput(
            "manual name must be a tool name: lowercase letters, digits and '_', "
            "starting with a letter, at most 64 characters"
        )
    return name


class ManualLibrary:
    """Reads `<root>/<name>.md`; `names()` lists what exists."""

    def __init__(self, root: Path = DEFAULT_MANUALS_DIR) -> None:
        self.root = Path(root)

    def names(self) -> list[str]:
        try:
            entries = sorted(self.root.iterdir())
        except FileNotFoundError:
            return []
        return [
            p.stem
            for p in entries
            if p.suffix == ".md" and _NAME.fullmatch(p.stem) and p.is_file()
            and not p.is_symlink()
        ]

    def has(self, name: str) -> bool:
        try:
            self.get(name)
        except (NotFound, InvalidInput):
            return False
        return True

    def get(self, name: str) -> str:
        """The markdown text; `NotFound` when there is none, `InvalidInput` on a bad name."""
        check_manual_name(name)
        try:
            dir_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            raise NotFound(f"no manual for {name!r}") from None
        try:
            try:
                fd = os.open(
                    f"{name}.md", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd
                )
            except OSError:
                raise NotFound(f"no manual for {name!r}") from None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise NotFound(f"no manual for {name!r}")
            with os.fdopen(fd, "rb") as fh:
                data = fh.read(MAX_MANUAL_BYTES + 1)
        finally:
            os.close(dir_fd)
        if len(data) > MAX_MANUAL_BYTES:
            raise InvalidInput(f"manual {name!r} is larger than {MAX_MANUAL_BYTES} bytes")
        return data.decode("utf-8", errors="replace")
