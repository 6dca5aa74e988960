"""The patterns of the search tools, compiled by RE2 (google-re2): linear-time matching.

Python's ``re`` backtracks: ``(a+)+$`` against a long line of ``a``s takes exponential time,
and a grep runs patterns an agent (or whoever steers it) wrote over files a sandbox wrote.
RE2 guarantees time linear in the text and refuses what would need backtracking
(back-references, look-around) with a clear error; its memory per pattern is capped too.
Globs are translated to RE2 regexes as well.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import re2

from runtime.errors import InvalidInput

MAX_PATTERN_CHARS = 1000
_REGEX_MEM = 8 * 1024 * 1024  # RE2's memory budget for one compiled pattern


def _options(ignore_case: bool = False) -> Any:
    opts = re2.Options()
    opts.case_sensitive = not ignore_case
    opts.max_mem = _REGEX_MEM
    opts.log_errors = False
    return opts


def compile_regex(pattern: str, *, ignore_case: bool = False) -> Any:
    """An RE2 regex; ``InvalidInput`` for what RE2 refuses (back-references, look-around,
    huge repetitions) or an overlong pattern."""
    if not pattern:
        raise InvalidInput("the pattern is empty")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidInput(f"the pattern is longer than {MAX_PATTERN_CHARS} characters")
    try:
        return re2.compile(pattern, _options(ignore_case))
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise InvalidInput(f"bad pattern (RE2 syntax: no back-references or look-around): "
                           f"{reason}") from None


def glob_to_regex(pattern: str) -> str:
    """Translate a glob to an anchored regex over '/'-separated paths: ``**`` any number of
    directories, ``*`` and ``?`` within one name, ``[...]`` a class (``[!...]`` negated)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[" and (end := pattern.find("]", i + 2)) > 0:
            body = pattern[i + 1:end]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            body = body.replace("\\", "\\\\").replace("[", "\\[")
            out.append(f"[{'^' if negate else ''}{body}]")
            i = end + 1
        else:
            out.append(re2.escape(c))
            i += 1
    return "^" + "".join(out) + "$"


@dataclass(frozen=True)
class Glob:
    """A compiled glob. Without '/' it matches a file's name at any depth (``*.py``);
    with one, the path relative to where the search starts (``src/**/*.ts``)."""

    pattern: str
    regex: Any = field(compare=False)
    by_name: bool

    @classmethod
    def compile(cls, pattern: str) -> Glob:
        if not pattern:
            raise InvalidInput("the glob is empty")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise InvalidInput(f"the glob is longer than {MAX_PATTERN_CHARS} characters")
        body = pattern.removeprefix("./")
        return cls(pattern, compile_regex(glob_to_regex(body)), "/" not in body)

    def matches(self, rel: str) -> bool:
        target = rel.rsplit("/", 1)[-1] if self.by_name else rel
        return self.regex.search(target) is not None


@dataclass(frozen=True)
class LinePattern:
    """A grep pattern: ``line`` is matched against each line; ``any_line`` (the same in
    multi-line mode) finds out in one pass whether a text has a matching line at all."""

    line: Any
    any_line: Any | None

    @classmethod
    def compile(cls, pattern: str, *, ignore_case: bool = False) -> LinePattern:
        line = compile_regex(pattern, ignore_case=ignore_case)
        # \A and \z mean each line's start and end per line, the text's in multi-line mode
        whole = None if ("\\A" in pattern or "\\z" in pattern) else compile_regex(
            "(?m)" + pattern, ignore_case=ignore_case)
        return cls(line, whole)
