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
  (`ToolRegistry.off_loop`, for `SessionToolCall` and `test_tool`): a CPU-bound thread still
  lets the loop take the GIL every few milliseconds, and the deadline frees the thread.

One module a job: `limits` (the bounds, the errors), `keywords` (refused keywords, the
document walk), `refs` (local pointers, the expansion count), `validation` (call time);
this package is their one import.
"""

from __future__ import annotations

import json
from typing import Any

from runtime.tools.schema_guard.keywords import REFUSED_KEYWORDS, check_document
from runtime.tools.schema_guard.limits import (
    DEFAULT_LIMITS,
    SchemaLimits,
    UnsafeSchema,
    ValidationBudgetExceeded,
)
from runtime.tools.schema_guard.refs import Expansion
from runtime.tools.schema_guard.validation import check_instance_shape, validate_instance

__all__ = [
    "DEFAULT_LIMITS",
    "REFUSED_KEYWORDS",
    "SchemaLimits",
    "UnsafeSchema",
    "ValidationBudgetExceeded",
    "check_instance_shape",
    "check_schema_cost",
    "validate_instance",
]


def check_schema_cost(schema: Any, limits: SchemaLimits = DEFAULT_LIMITS) -> None:
    """Refuse (`UnsafeSchema`) a schema whose validation could be expensive or unbounded."""
    if not isinstance(schema, dict | bool):
        raise UnsafeSchema("a schema must be an object (or true/false)")
    check_document(schema, limits)
    try:
        encoded = json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError):
        raise UnsafeSchema("schema must be JSON (string keys, no NaN or Infinity)") from None
    if len(encoded.encode("utf-8")) > limits.max_bytes:
        raise UnsafeSchema(f"schema is larger than {limits.max_bytes} bytes")
    Expansion(schema, limits).check()
