"""`$ref`s inside a tool's parameters schema: where a local pointer lands, and the size and
depth of the schema once every `$ref` is inlined, computed without inlining it (cycles are
refused). Load time, for `schema_guard.check_schema_cost`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from runtime.tools.schema_guard.keywords import MANY, NAME_MAPS, NAMED, ONE, check_keyword
from runtime.tools.schema_guard.limits import SchemaLimits, UnsafeSchema


def resolve_pointer(root: Any, ref: str) -> Any:
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
            if expect == "schema" and part not in ONE + MANY and part not in NAME_MAPS:
                raise UnsafeSchema(f"'$ref' {ref!r} points outside the schema's subschemas "
                                   "(use '#/$defs/NAME')")
            child = node[part]
            if expect != "schema":
                expect = "schema"
            elif part in NAME_MAPS:
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


class Expansion:
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
            check_keyword(key, value)
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
            target = resolve_pointer(self.root, child.ref)
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
        for key in ONE:
            value = node.get(key)
            if isinstance(value, dict | bool):
                yield value
        for key in MANY:
            value = node.get(key)
            if isinstance(value, list):
                yield from value
        for key in NAMED:
            value = node.get(key)
            if isinstance(value, dict):
                yield from (v for v in value.values() if isinstance(v, dict | bool))


@dataclass(frozen=True)
class _Ref:
    ref: str
