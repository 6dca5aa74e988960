"""Bounds on what an agent-written JSON Schema, and the arguments checked against it, may cost.

A user tool's `parameters` schema is written by an agent, and the supervisor validates every
call's arguments against it before any policy decision. Left alone, a 2 KB schema makes that
validation exponential (`$defs` chain `a_i: {allOf: [{$ref: a_i+1}, {$ref: a_i+1}]}`: 4x per
two levels), a `{"$ref": "#"}` cycle recurses until Python gives up (a 500), and a regex
keyword backtracks for ever on a crafted string. This module refuses such schemas at load
time (`check_schema_cost`, raising `UnsafeSchema`) and runs validation itself under bounds
(`validate_instance`):

- **Document bounds**: at most `max_bytes` of JSON, `max_depth` levels of nesting and
  `max_nodes` JSON values.
- **`$ref` recursion is refused**, not bounded: every `$ref` must be a local JSON pointer
  (`#` or `#/...`) that resolves inside the document, and following refs must never come
  back to a schema already being expanded. With no cycle the expanded schema is a finite
  tree, so its size is a number we can compute (memoised per ref target, so a 2^24 tree costs
  24 steps) and cap: at most `max_expanded` subschemas and `max_expanded_depth` levels once
  every `$ref` is inlined. Bounding the expansion of recursive schemas instead would keep
  tree-shaped parameter types, which tool arguments hardly need, at the price of a cost that
  depends on the instance's shape; refusing keeps the bound static and the message simple.
- **Keywords refused**: `pattern` and `patternProperties` (Python's `re` backtracks
  exponentially; RE2 would be linear but has neither the ECMA-262 dialect JSON Schema
  specifies nor Python's, so a pattern would silently mean something else: a tool checks
  formats inside `execute`, in its sandbox, under its CPU limit); `unevaluatedProperties` /
  `unevaluatedItems` (jsonschema re-walks every applicator for each, outside the expansion
  count); `$id`/`id`, `$anchor`, `$dynamicRef`/`$dynamicAnchor` and their 2019-09 forms
  (they move resolution out of the document: a `$ref` under a foreign `$id` is fetched).
- **Validation bounds**: the arguments are bounded in depth and node count before anything
  walks them; every keyword call checks a deadline (`budget_s`), so the total time is
  bounded whatever the product of schema and instance; `uniqueItems` is linear (hashing a
  canonical form) instead of jsonschema's quadratic fallback; only the first few errors are
  collected. Callers on the event loop run `validate_instance` in a thread
  (`ToolRegistry.invoke`, `test_tool`): a CPU-bound thread still lets the loop take the GIL
  every few milliseconds, and the deadline frees the thread.
"""

from __future__ import annotations

import contextvars
import itertools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import jsonschema
import referencing
import referencing.exceptions
from jsonschema import ValidationError

from runtime.errors import InvalidInput

__all__ = [
    "SchemaLimits",
    "UnsafeSchema",
    "ValidationBudgetExceeded",
    "check_instance_shape",
    "check_schema_cost",
    "validate_instance",
]


class UnsafeSchema(InvalidInput):
    """A schema this module refuses to evaluate; the message says which bound it passes."""

    code = "unsafe_schema"


class ValidationBudgetExceeded(InvalidInput):
    """Arguments that would take longer than the budget to validate (or are too large)."""

    code = "validation_budget"


@dataclass(frozen=True)
class SchemaLimits:
    max_bytes: int = 32 * 1024
    max_depth: int = 32
    max_nodes: int = 4000
    max_expanded: int = 2000
    max_expanded_depth: int = 48
    # instance (the arguments)
    max_instance_depth: int = 64
    max_instance_nodes: int = 100_000
    budget_s: float = 1.0
    max_errors: int = 5


DEFAULT_LIMITS = SchemaLimits()

REFUSED_KEYWORDS: dict[str, str] = {
    "pattern": "regular expressions are not evaluated by the supervisor (a hostile one "
               "backtracks for ever); check the format inside execute instead",
    "patternProperties": "regular expressions are not evaluated by the supervisor; use "
                         "properties/additionalProperties and check names inside execute",
    "unevaluatedProperties": "use additionalProperties instead",
    "unevaluatedItems": "use items instead",
    "$id": "schemas are resolved within the document only",
    "id": "schemas are resolved within the document only",
    "$anchor": "use '$ref': '#/$defs/NAME' instead",
    "$dynamicRef": "use '$ref': '#/$defs/NAME' instead",
    "$dynamicAnchor": "use '$ref': '#/$defs/NAME' instead",
    "$recursiveRef": "recursive schemas are not allowed",
    "$recursiveAnchor": "recursive schemas are not allowed",
}

# Where JSON Schema puts subschemas (2020-12, plus the draft-7 spellings jsonschema accepts).
_ONE = ("not", "if", "then", "else", "contains", "additionalProperties", "propertyNames",
        "additionalItems", "items")
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_NAMED = ("properties", "dependentSchemas", "dependencies")
_NAME_MAPS = {"properties", "$defs", "definitions", "dependentSchemas", "dependencies",
              "patternProperties"}
_DATA_KEYWORDS = {"default", "examples", "enum", "const", "dependentRequired", "required",
                  "title", "description", "$comment"}


# ---- load time: the schema document ----------------------------------------------------


def check_schema_cost(schema: Any, limits: SchemaLimits = DEFAULT_LIMITS) -> None:
    """Refuse (`UnsafeSchema`) a schema whose validation could be expensive or unbounded."""
    if not isinstance(schema, dict | bool):
        raise UnsafeSchema("a schema must be an object (or true/false)")
    _check_document(schema, limits)
    try:
        encoded = json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError):
        raise UnsafeSchema("schema must be JSON (string keys, no NaN or Infinity)") from None
    if len(encoded.encode("utf-8")) > limits.max_bytes:
        raise UnsafeSchema(f"schema is larger than {limits.max_bytes} bytes")
    _Expansion(schema, limits).check()


def _check_document(schema: Any, limits: SchemaLimits) -> None:
    """Depth, node count and keyword names, iteratively (no recursion on hostile input)."""
    # (node, depth, in_name_map, is_data)
    stack: list[tuple[Any, int, bool, bool]] = [(schema, 1, False, False)]
    nodes = 0
    while stack:
        node, depth, in_name_map, is_data = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            raise UnsafeSchema(f"schema has more than {limits.max_nodes} values")
        if depth > limits.max_depth:
            raise UnsafeSchema(f"schema nests deeper than {limits.max_depth} levels")
        if isinstance(node, list):
            stack.extend((item, depth + 1, False, is_data) for item in node)
        elif isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    raise UnsafeSchema("schema keys must be strings")
                if not is_data and not in_name_map:
                    _check_keyword(key, value)
                data = is_data or (not in_name_map and key in _DATA_KEYWORDS)
                stack.append((value, depth + 1, not data and not in_name_map
                              and key in _NAME_MAPS, data))


def _check_keyword(key: str, value: Any) -> None:
    if key in REFUSED_KEYWORDS:
        raise UnsafeSchema(f"JSON Schema keyword {key!r} is not allowed in tool parameters: "
                           f"{REFUSED_KEYWORDS[key]}")
    if key == "$ref" and not (isinstance(value, str) and (value == "#" or
                                                          value.startswith("#/"))):
        raise UnsafeSchema("only local '$ref's are allowed in tool parameters "
                           "('#' or '#/$defs/NAME')")


def _resolve_pointer(root: Any, ref: str) -> Any:
    """RFC 6901 inside the document, as jsonschema reads a `#...` fragment, through schema
    positions only (`$defs/NAME`, `properties/NAME`, `allOf/0`, `not`...): a target inside
    `default`, `enum` or an unknown keyword was never checked as a schema."""
    node = root
    fragment = unquote(ref[1:])
    if not fragment:
        return node
    expect = "schema"  # what `node` is: a schema, a list of schemas or a map of them
    for raw in fragment[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            if expect == "schema" and part not in _ONE + _MANY and part not in _NAME_MAPS:
                raise UnsafeSchema(f"'$ref' {ref!r} points outside the schema's subschemas "
                                   "(use '#/$defs/NAME')")
            child = node[part]
            if expect != "schema":
                expect = "schema"
            elif part in _NAME_MAPS:
                expect = "map"
            elif isinstance(child, list):
                expect = "list"
            node = child
        elif (expect == "list" and isinstance(node, list) and part.isascii()
              and part.isdigit() and int(part) < len(node)):
            node = node[int(part)]
            expect = "schema"
        else:
            raise UnsafeSchema(f"'$ref' {ref!r} points at nothing in the schema")
    if expect != "schema":
        raise UnsafeSchema(f"'$ref' {ref!r} does not point at a schema")
    return node


class _Expansion:
    """The size and depth of the schema with every `$ref` inlined, without inlining it.

    Each ref target's (size, height) is computed once; a ref back to a target still being
    expanded is a cycle. Python recursion depth stays bounded: the walk stops at
    `max_expanded_depth`, and the document itself is at most `max_depth` deep.
    """

    def __init__(self, root: Any, limits: SchemaLimits) -> None:
        self.root = root
        self.limits = limits
        self.memo: dict[int, tuple[int, int]] = {}
        self.open: set[int] = set()

    def check(self) -> None:
        size, height = self._size(self.root, 1)
        if size > self.limits.max_expanded:
            raise self._too_big()

    def _too_big(self) -> UnsafeSchema:
        return UnsafeSchema(
            f"schema expands to more than {self.limits.max_expanded} subschemas once its "
            "'$ref's are followed (a $defs chain that references each level twice doubles "
            "at every level)"
        )

    def _size(self, node: Any, depth: int) -> tuple[int, int]:
        """(subschemas, height) of `node` expanded; `depth` is where it is used."""
        if depth > self.limits.max_expanded_depth:
            raise UnsafeSchema(
                f"schema nests deeper than {self.limits.max_expanded_depth} levels once its "
                "'$ref's are followed"
            )
        if not isinstance(node, dict):
            return 1, 1  # true/false (or malformed: check_schema refuses it later)
        for key, value in node.items():  # a $ref may land outside the checked keywords
            _check_keyword(key, value)
        size, height = 1, 1
        for child in self._children(node):
            child_size, child_height = self._child(child, depth + 1)
            size += child_size
            height = max(height, child_height + 1)
            if size > self.limits.max_expanded:
                raise self._too_big()
        return size, height

    def _child(self, child: Any, depth: int) -> tuple[int, int]:
        if isinstance(child, _Ref):
            target = _resolve_pointer(self.root, child.ref)
            if not isinstance(target, dict | bool):
                raise UnsafeSchema(f"'$ref' {child.ref!r} does not point at a schema")
            key = id(target)
            if key in self.open:
                raise UnsafeSchema(
                    f"'$ref' {child.ref!r} refers back to a schema that contains it: "
                    "recursive schemas are not allowed in tool parameters"
                )
            if key not in self.memo:
                self.open.add(key)
                try:
                    self.memo[key] = self._size(target, depth)
                finally:
                    self.open.discard(key)
            size, height = self.memo[key]
            if depth + height - 1 > self.limits.max_expanded_depth:
                raise UnsafeSchema(
                    f"schema nests deeper than {self.limits.max_expanded_depth} levels once "
                    "its '$ref's are followed"
                )
            return size, height
        return self._size(child, depth)

    @staticmethod
    def _children(node: dict[str, Any]) -> Iterator[Any]:
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield _Ref(ref)
        for key in _ONE:
            value = node.get(key)
            if isinstance(value, dict | bool):
                yield value
        for key in _MANY:
            value = node.get(key)
            if isinstance(value, list):
                yield from value
        for key in _NAMED:
            value = node.get(key)
            if isinstance(value, dict):
                yield from (v for v in value.values() if isinstance(v, dict | bool))


@dataclass(frozen=True)
class _Ref:
    ref: str


# ---- call time: the arguments ----------------------------------------------------------


def check_instance_shape(instance: Any, limits: SchemaLimits = DEFAULT_LIMITS) -> None:
    """Depth and node count of the arguments, iteratively, before anything recursive."""
    stack: list[tuple[Any, int]] = [(instance, 1)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_instance_nodes:
            raise ValidationBudgetExceeded(
                f"arguments have more than {limits.max_instance_nodes} values")
        if depth > limits.max_instance_depth:
            raise ValidationBudgetExceeded(
                f"arguments nest deeper than {limits.max_instance_depth} levels")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


_DEADLINE: contextvars.ContextVar[float] = contextvars.ContextVar("navi_schema_deadline")


class _OutOfTime(Exception):
    """Raised inside jsonschema's keyword calls; never leaves this module."""


def _budgeted(fn: Callable[..., Any]) -> Callable[..., Any]:
    def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if time.monotonic() > _DEADLINE.get(0.0):
            raise _OutOfTime
        return fn(validator, value, instance, schema)

    return keyword


def _canonical(value: Any) -> Any:
    """A hashable form where JSON-equal values (1 == 1.0, key order) are equal, true != 1."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, dict):
        return ("object", frozenset((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("array", tuple(_canonical(v) for v in value))
    if isinstance(value, int | float):
        return ("number", value)
    return (type(value).__name__, value)


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """Linear `uniqueItems` (jsonschema falls back to comparing every pair)."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _canonical(item)
        if key in seen:
            yield ValidationError("array has non-unique elements")
            return
        seen.add(key)


def _build_validator() -> type[Any]:
    base = jsonschema.Draft202012Validator
    keywords = {name: _budgeted(fn) for name, fn in base.VALIDATORS.items()}
    keywords["uniqueItems"] = _budgeted(_unique_items)
    return jsonschema.validators.extend(base, keywords)  # type: ignore[no-any-return]


_Validator = _build_validator()
_NO_REMOTE = referencing.Registry()  # no retrieval: an unknown URI is an error, never a fetch


def validate_instance(
    schema: dict[str, Any], instance: Any, limits: SchemaLimits = DEFAULT_LIMITS
) -> list[str]:
    """Validate under the bounds; the first problems as `where: message` (empty: valid).

    Raises `ValidationBudgetExceeded` for arguments too large or too slow to check. The
    schema must have passed `check_schema_cost` (the descriptor does it at load time).
    """
    check_instance_shape(instance, limits)
    validator = _Validator(schema, registry=_NO_REMOTE)
    token = _DEADLINE.set(time.monotonic() + limits.budget_s)
    try:
        errors = list(itertools.islice(validator.iter_errors(instance), limits.max_errors))
    except _OutOfTime:
        raise ValidationBudgetExceeded(
            f"arguments could not be checked within {limits.budget_s:g} s "
            "(schema and arguments too large together)"
        ) from None
    except (RecursionError, referencing.exceptions.Unresolvable) as exc:
        raise UnsafeSchema(f"schema cannot be evaluated: {type(exc).__name__}") from None
    finally:
        _DEADLINE.reset(token)
    problems = []
    for err in sorted(errors, key=lambda e: str(list(e.absolute_path))):
        where = ".".join(str(p) for p in err.absolute_path) or "(arguments)"
        problems.append(f"{where}: {err.message[:200]}")
    return problems
