"""OpenSCAD's console log -> structured diagnostics (severity, message, file, line).

OpenSCAD 2021.01 reports problems as prefixed lines (``ERROR:``, ``WARNING:``, ``TRACE:``,
``DEPRECATED:``, ``ECHO:`` …) and names places as ``in file F, line N`` (``F`` relative to
the main file's directory) or ``import() at line N``. Everything else it prints (cache and
CGAL statistics) is noise here. File names are shown workspace-relative; the file being
compiled or linted is ``None`` ("your code"). The log is agent-influenced text: it is parsed,
capped and never trusted for anything but display.
"""

from __future__ import annotations

import posixpath
import re
from typing import Literal

from pydantic import BaseModel

Severity = Literal["error", "warning", "trace", "echo"]

MAX_DIAGNOSTICS = 200
MAX_MESSAGE_CHARS = 500
WORKSPACE_DIR = "/workspace"

_PREFIXES: dict[str, Severity] = {
    "ERROR": "error",
    "EXPORT-ERROR": "error",
    "WARNING": "warning",
    "UI-WARNING": "warning",
    "FONT-WARNING": "warning",
    "EXPORT-WARNING": "warning",
    "DEPRECATED": "warning",
    "TRACE": "trace",
    "ECHO": "echo",
}
_LINE = re.compile(r"^(?P<prefix>[A-Z][A-Z-]*): ?(?P<text>.*)$")
_IN_FILE = re.compile(r",? in file (?P<file>.+?), line (?P<line>\d+)\.?\s*$")
_OLD_PARSER = re.compile(r'^Parser error in file "(?P<file>.+?)", line (?P<line>\d+): (?P<msg>.*)$')
_AT_LINE = re.compile(r",? (?:\w+\(\) )?at line (?P<line>\d+)\.?\s*$")
_PLAIN: dict[str, tuple[Severity, str]] = {
    "Current top level object is empty.": ("error", "the model is empty: nothing to export"),
    "Current top level object is not a 3D object.": (
        "error", "the top level object is not 3D (2D shapes need linear_extrude or "
        "rotate_extrude before they can become an STL)"),
}


class Diagnostic(BaseModel):
    severity: Severity
    message: str
    file: str | None = None
    line: int | None = None

    def render(self) -> str:
        where = f"{self.file}:" if self.file else ""
        where += f"line {self.line}: " if self.line is not None else (" " if where else "")
        return f"{where}{self.severity}: {self.message}"


def display_file(name: str, base_dir: str, main_file: str) -> str | None:
    """`name` as OpenSCAD printed it -> workspace-relative, `None` for the main file."""
    name = name.strip().strip("'\"")
    path = posixpath.normpath(name if name.startswith("/") else posixpath.join(base_dir, name))
    if path == posixpath.normpath(main_file):
        return None
    if path.startswith(WORKSPACE_DIR + "/"):
        return path[len(WORKSPACE_DIR) + 1:]
    return path


def parse_log(text: str, *, base_dir: str, main_file: str) -> list[Diagnostic]:
    """Diagnostics of an OpenSCAD run; `base_dir` is the main file's directory (in the
    container), `main_file` its absolute path."""
    found: list[Diagnostic] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line in _PLAIN:
            severity, message = _PLAIN[line]
            found.append(Diagnostic(severity=severity, message=message))
        else:
            match = _LINE.match(line)
            if match is None or match["prefix"] not in _PREFIXES:
                continue
            found.append(_diagnostic(_PREFIXES[match["prefix"]], match["text"],
                                     base_dir, main_file))
        if len(found) >= MAX_DIAGNOSTICS:
            break
    return found


def _diagnostic(severity: Severity, text: str, base_dir: str, main_file: str) -> Diagnostic:
    file: str | None = None
    line: int | None = None
    if (old := _OLD_PARSER.match(text)) is not None:
        file = display_file(old["file"], base_dir, main_file)
        line, text = int(old["line"]), f"Parser error: {old['msg']}"
    elif (place := _IN_FILE.search(text)) is not None:
        file = display_file(place["file"], base_dir, main_file)
        line, text = int(place["line"]), text[: place.start()]
    elif severity != "echo" and (at := _AT_LINE.search(text)) is not None:
        line, text = int(at["line"]), text[: at.start()]
    return Diagnostic(severity=severity, message=text.strip()[:MAX_MESSAGE_CHARS] or "(empty)",
                      file=file, line=line)


def counts(diagnostics: list[Diagnostic]) -> dict[str, int]:
    return {
        "errors": sum(d.severity == "error" for d in diagnostics),
        "warnings": sum(d.severity == "warning" for d in diagnostics),
    }


def summary(diagnostics: list[Diagnostic], *, with_echo: bool = True) -> str:
    """Readable lines for the model: counts, then one line per diagnostic."""
    n = counts(diagnostics)
    head = (f"{n['errors']} error{'s' if n['errors'] != 1 else ''}, "
            f"{n['warnings']} warning{'s' if n['warnings'] != 1 else ''}")
    shown = [d for d in diagnostics if with_echo or d.severity != "echo"]
    return "\n".join([head, *(f"  {d.render()}" for d in shown)])
