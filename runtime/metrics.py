"""Prometheus metrics of one app instance (own registry: no process-global state).

Every label value comes from a closed set, never from what a tenant typed: each label value
is a series the server keeps forever. `tool` is a built-in tool's name, `user_tool` for any
agent-written tool, `unknown` for a name that is neither (`tool_label`); `outcome` is a fixed
word or a `NaviError` code; `rule` names a rule of the operator's policy file; `tenant` is a
tenant id (made by the operator, never by a tenant).

Every series of a tenant's calls carries its `tenant`, so `render(tenant)` can show a tenant
only its own (its auditor's or tenant admin's `/v1/metrics`); server-wide series (the audit
log's write latency) are the operator's only: `render()` shows everything.
"""

from __future__ import annotations

from collections.abc import Container, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric

DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
USER_TOOL = "user_tool"
UNKNOWN_TOOL = "unknown"
TENANT_FAMILIES = frozenset({"navi_executions", "navi_execution_duration_seconds",
                             "navi_active_executions", "navi_policy_denials"})


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
            "navi_executions", "Tool executions by outcome.", ["tenant", "tool", "outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "navi_execution_duration_seconds", "Sandboxed execution wall time.",
            ["tenant", "tool"],
            buckets=DURATION_BUCKETS, registry=self.registry,
        )
        self.active = Gauge(
            "navi_active_executions", "Executions (containers) running now.", ["tenant"],
            registry=self.registry,
        )
        self.denials = Counter(
            "navi_policy_denials", "Executions the policy denied.", ["tenant", "tool", "rule"],
            registry=self.registry,
        )
        self.audit_write = Histogram(
            "navi_audit_write_seconds", "Audit append latency (with fsync).",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
            registry=self.registry,
        )

    tool_label = staticmethod(tool_label)

    def render(self, tenant: str | None = None) -> bytes:
        """Prometheus text: every series (`tenant` None, the operator's), else only the
        series of `tenant`'s own calls."""
        if tenant is None:
            return generate_latest(self.registry)
        view = CollectorRegistry(auto_describe=False)
        view.register(_TenantView(self.registry, tenant))
        return generate_latest(view)


class _TenantView:
    """The families labelled by tenant, with only `tenant`'s samples."""

    def __init__(self, registry: CollectorRegistry, tenant: str) -> None:
        self.registry = registry
        self.tenant = tenant

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            if family.name not in TENANT_FAMILIES:
                continue  # server-wide: the operator's only
            mine = Metric(family.name, family.documentation, family.type, family.unit)
            mine.samples = [s for s in family.samples if s.labels.get("tenant") == self.tenant]
            yield mine
