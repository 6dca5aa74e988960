"""Call time: arguments checked against an already-accepted schema under bounds (their own
size and depth first, then a deadline on every keyword call, a linear `uniqueItems`, only
the first few errors). See `schema_guard`."""

from __future__ import annotations

import contextvars
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import referencing
import referencing.exceptions
from jsonschema import ValidationError

from runtime.tools.schema_guard.limits import (
    DEFAULT_LIMITS,
    SchemaLimits,
    UnsafeSchema,
    ValidationBudgetExceeded,
)


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
