"""The bounds of `schema_guard` and the two errors it raises (shared by its load-time and
call-time halves)."""

from __future__ import annotations

from dataclasses import dataclass

from runtime.errors import InvalidInput


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
