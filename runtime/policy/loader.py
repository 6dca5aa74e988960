"""Read a policy YAML file into a validated ``PolicyFile``; every error names file:line:column.

PyYAML's composed node tree keeps the position of every key and item; pydantic's error
locations are mapped back onto it, so `profiles.developer.alow` is reported at the line of
`alow:`, not as a bare traceback. Duplicate keys (which YAML would silently collapse, letting
a second `deny:` hide the first) are rejected. Only the safe loader is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import yaml
from pydantic import ValidationError

from runtime.errors import ConfigError
from runtime.policy.model import PolicyFile, name_problems

Loc = tuple[Any, ...]  # str/int, or any scalar a bad YAML key may be
MAX_POLICY_BYTES = 1024 * 1024
MAX_DEPTH = 32
MAX_NODES = 100_000  # values built, aliases counted each time they expand (billion laughs)


class PolicyFileError(ConfigError):
    """A policy file that does not parse or validate; `problems` lists each with its place."""

    code = "policy_invalid"

    def __init__(self, source: str, problems: list[dict[str, Any]]) -> None:
        problems = sorted(problems, key=lambda p: (p.get("line") or 0, p.get("column") or 0))
        first = problems[0]
        super().__init__(_format(source, first), source=source, problems=problems)
        self.source = source
        self.problems = problems

    def render(self) -> str:
        return "\n".join(_format(self.source, p) for p in self.problems)


def _format(source: str, problem: dict[str, Any]) -> str:
    where = source
    if problem.get("line") is not None:
        where += f":{problem['line']}:{problem['column']}"
    path = problem.get("path")
    return f"{where}: {path + ': ' if path else ''}{problem['message']}"


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class _Builder:
    """Plain Python data from a node tree, recording the mark of every key and item."""

    def __init__(self, marks: dict[Loc, yaml.Mark], source: str) -> None:
        self.marks = marks
        self.source = source
        self.scalars = yaml.SafeLoader("")  # scalars only: the safe loader's type resolution
        self.nodes = 0

    def build(self, node: yaml.Node, loc: Loc) -> Any:
        if len(loc) > MAX_DEPTH:
            _raise(self.source, node.start_mark, loc, "nested too deeply")
        self.nodes += 1
        if self.nodes > MAX_NODES:
            _raise(self.source, node.start_mark, loc,
                   f"more than {MAX_NODES} values (do aliases expand too much?)")
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    _raise(self.source, key_node.start_mark, loc, "merge keys (<<) not supported")
                key = self.build(key_node, loc)
                if not isinstance(key, str | int | float | bool) or key is None:
                    _raise(self.source, key_node.start_mark, loc, "keys must be scalars")
                if key in out:
                    _raise(self.source, key_node.start_mark, loc + (key,), f"duplicate key {key!r}")
                self.marks[loc + (key,)] = key_node.start_mark
                out[key] = self.build(value_node, loc + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            items = []
            for i, item in enumerate(node.value):
                self.marks[loc + (i,)] = item.start_mark
                items.append(self.build(item, loc + (i,)))
            return items
        try:
            return self.scalars.construct_object(node)
        except yaml.YAMLError as exc:
            reason = getattr(exc, "problem", None) or "bad value"
            _raise(self.source, node.start_mark, loc, f"not valid YAML: {reason}")


def _raise(source: str, mark: yaml.Mark | None, loc: Loc, message: str) -> NoReturn:
    problem: dict[str, Any] = {"path": _dotted(loc), "message": message, "line": None,
                               "column": None}
    if mark is not None:
        problem["line"], problem["column"] = mark.line + 1, mark.column + 1
    raise PolicyFileError(source, [problem])


def _nearest_mark(loc: Loc, marks: dict[Loc, yaml.Mark]) -> yaml.Mark | None:
    for end in range(len(loc), -1, -1):
        mark = marks.get(loc[:end])
        if mark is not None:
            return mark
    return None


def parse_policy(text: str, source: str = "<policy>") -> PolicyFile:
    """Parse and validate policy text; raises ``PolicyFileError`` with locations."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_POLICY_BYTES:
        raise PolicyFileError(source, [{"message": "file too large", "line": None}])
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        reason = getattr(exc, "problem", None) or str(exc)
        _raise(source, mark, (), f"not valid YAML: {reason}")
    except RecursionError:  # the composer recurses once per nesting level
        _raise(source, None, (), "nested too deeply")
    if root is None:
        _raise(source, None, (), "empty policy file")
    marks: dict[Loc, yaml.Mark] = {(): root.start_mark}
    data = _Builder(marks, source).build(root, ())
    if not isinstance(data, dict):
        _raise(source, root.start_mark, (), "the top level must be a mapping")
    try:
        policy = PolicyFile.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False, include_input=False):
            loc = tuple(p for p in err["loc"] if isinstance(p, str | int))
            # pydantic appends "[key]" for dict-key errors; keep real path parts only
            loc = tuple(p for p in loc if not (isinstance(p, str) and p == "[key]"))
            mark = _nearest_mark(loc, marks)
            problems.append({
                "path": _dotted(loc), "message": err["msg"],
                "line": mark.line + 1 if mark else None,
                "column": mark.column + 1 if mark else None,
            })
        raise PolicyFileError(source, problems) from None
    semantic = name_problems(policy)
    if semantic:
        problems = []
        for loc, message in semantic:
            mark = _nearest_mark(loc, marks)
            problems.append({
                "path": _dotted(loc), "message": message,
                "line": mark.line + 1 if mark else None,
                "column": mark.column + 1 if mark else None,
            })
        raise PolicyFileError(source, problems)
    return policy


def load_policy(path: Path) -> PolicyFile:
    """Read and validate a policy file; any problem is a ``PolicyFileError`` (a ConfigError)."""
    try:
        with path.open("rb") as fh:  # bounded: /dev/zero or a huge file must not hang us
            raw = fh.read(MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise PolicyFileError(str(path), [{"message": f"cannot read: {exc.strerror}"}]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyFileError(str(path), [{"message": "not UTF-8 text"}]) from None
    return parse_policy(text, str(path))
