"""Moved to `runtime.metrics` (the tool-call service below the API records them); re-exported
here for code written against the old path."""

from runtime.metrics import DURATION_BUCKETS, UNKNOWN_TOOL, USER_TOOL, Metrics, tool_label

__all__ = ["DURATION_BUCKETS", "UNKNOWN_TOOL", "USER_TOOL", "Metrics", "tool_label"]
