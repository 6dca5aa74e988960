"""Which JSON Schema keywords a tool's parameters may use, where subschemas sit, and the
walk that bounds the document's size and depth (`schema_guard`, load time)."""

from __future__ import annotations

from typing import Any

from runtime.tools.schema_guard.limits import SchemaLimits, UnsafeSchema

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
ONE = ("not", "if", "then", "else", "contains", "additionalProperties", "propertyNames",
        "additionalItems", "items")
MANY = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
NAMED = ("properties", "dependentSchemas", "dependencies")
NAME_MAPS = {"properties", "$defs", "definitions", "dependentSchemas", "dependencies",
              "patternProperties"}
DATA_KEYWORDS = {"default", "examples", "enum", "const", "dependentRequired", "required",
                  "title", "description", "$comment"}

def check_document(schema: Any, limits: SchemaLimits) -> None:
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
                    check_keyword(key, value)
                data = is_data or (not in_name_map and key in DATA_KEYWORDS)
                stack.append((value, depth + 1, not data and not in_name_map
                              and key in NAME_MAPS, data))


def check_keyword(key: str, value: Any) -> None:
    if key in REFUSED_KEYWORDS:
        raise UnsafeSchema(f"JSON Schema keyword {key!r} is not allowed in tool parameters: "
                           f"{REFUSED_KEYWORDS[key]}")
    if key == "$ref" and not (isinstance(value, str) and (value == "#" or
                                                          value.startswith("#/"))):
        raise UnsafeSchema("only local '$ref's are allowed in tool parameters "
                           "('#' or '#/$defs/NAME')")
