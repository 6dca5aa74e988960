"""Prometheus metrics of one app instance (own registry: no process-global state).

Every label value comes from a closed set, never from what a tenant typed: each label value
is a series the server keeps forever. `tool` is a built-in tool's name, `user_tool` for any
agent-written tool, `unknown` for a name that is neither (`tool_label`); `outcome` is a fixed
word or a `NaviError` code; `rule` names a rule of the operator's policy file.
"""

from __future__ import annotations

from collections.abc import Container

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
USER_TOOL = "user_tool"
UNKNOWN_TOOL = "unknown"


def tool_label(name: str, builtins: Container[str], *, found: bool) -> str:
    """The `tool` label of a call: a built-in's name, `user_tool` for another tool that was
    `found` (the tenant's own), else `unknown`."""
    if name in builtins:
        return name
    return USER_TOOL if found else UNKNOWN_TOOL


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.executions = Counter(
            "navi_executions", "Tool executions by outcome.", ["tool", "outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "navi_execution_duration_seconds", "Sandboxed execution wall time.", ["tool"],
            buckets=DURATION_BUCKETS, registry=self.registry,
        )
        self.active = Gauge(
            "navi_active_executions", "Executions (containers) running now.",
            registry=self.registry,
        )
        self.denials = Counter(
            "navi_policy_denials", "Executions the policy denied.", ["tool", "rule"],
            registry=self.registry,
        )
        self.audit_write = Histogram(
            "navi_audit_write_seconds", "Audit append latency (with fsync).",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
            registry=self.registry,
        )

    tool_label = staticmethod(tool_label)

    def render(self) -> bytes:
        return generate_latest(self.registry)
