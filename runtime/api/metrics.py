"""Prometheus metrics of one app instance (own registry: no process-global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


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

    def render(self) -> bytes:
        return generate_latest(self.registry)
