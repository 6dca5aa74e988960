"""`limits.processes`, `limits.ports` and `quotas.processes_per_tenant`: defaults, the
shipped policies, overlays that may only lower; `process_start` under terminal's rule; RE2
patterns for `process_wait`."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from runtime.errors import InvalidInput
from runtime.policy.decision import Action, Subject
from runtime.policy.engine import PolicyEngine
from runtime.policy.loader import parse_policy
from runtime.policy.model import TenantOverlay
from runtime.processes.monitor import compile_pattern

ROOT = Path(__file__).resolve().parents[2]
SUBJECT = Subject(tenant="t1", tenant_name="acme")


def engine(text: str) -> PolicyEngine:
    return PolicyEngine(parse_policy(text, "test.yaml"))


BASE = """
version: 1
defaults: {limits: {processes: {max_per_session: 6}}, quotas: {processes_per_tenant: 9}}
images: {terminal: python, code_exec: python}
network: {egress_allowlist: [pypi.org]}
profiles:
  dev:
    allow: [group:exec]
    limits: {ports: true, processes: {max_lifetime_s: 600}}
    tools:
      terminal: {network: egress, egress: [pypi.org], limits: {memory_mb: 256}}
tenants:
  "*": {profiles: [dev], limits: {processes: {max_per_session: 2}}}
"""


def test_defaults_and_the_shipped_policies() -> None:
    default = PolicyEngine.from_file(ROOT / "policies/default.yaml")
    limits = default.session_limits(SUBJECT)
    assert limits.processes.model_dump() == {"max_per_session": 4, "max_kernels_per_session": 2,
                                             "max_agents_per_session": 4,
                                             "max_agent_depth": 2,
                                             "max_lifetime_s": 3600.0}
    assert limits.ports and limits.ports_rule == "profiles.developer.limits.ports"
    assert default.quotas("acme").processes_per_tenant == 16
    strict = PolicyEngine.from_file(ROOT / "policies/strict.yaml")
    assert not strict.session_limits(SUBJECT).ports


def test_profile_raises_tenant_lowers_and_ports_need_saying() -> None:
    policy = engine(BASE)
    subject = SUBJECT.model_copy(update={"profile": "dev"})
    limits = policy.session_limits(subject)
    assert limits.processes.max_per_session == 2  # the tenant entry lowers 6
    assert limits.processes.max_lifetime_s == 600
    assert limits.ports
    assert policy.quotas("acme").processes_per_tenant == 9
    lowered = policy.with_overlay("acme", TenantOverlay.model_validate(
        {"limits": {"ports": False, "processes": {"max_per_session": 5,
                                                  "max_lifetime_s": 60}}}))
    got = lowered.session_limits(subject)
    assert got.processes.max_per_session == 2, "an overlay cannot raise"
    assert got.processes.max_lifetime_s == 60
    assert not got.ports and got.ports_rule == "overlays.acme.limits.ports"
    unsaid = engine(BASE.replace("ports: true, ", ""))
    assert not unsaid.session_limits(subject).ports, "ports are off unless the policy says so"


def test_process_start_runs_under_terminals_rule() -> None:
    policy = engine(BASE)
    subject = SUBJECT.model_copy(update={"profile": "dev"})
    decision = policy.decide(subject, Action(tool="process_start"))
    assert decision.verdict == "allow" and decision.image == "python"
    assert decision.egress_allowlist == ["pypi.org"]
    assert decision.limits.memory_mb == 256


def test_patterns_are_linear_time_and_capped() -> None:
    evil = compile_pattern(r"(a+)+$")
    began = time.monotonic()
    assert evil.search("a" * 50_000 + "b") is None
    assert time.monotonic() - began < 1.0
    with pytest.raises(InvalidInput):
        compile_pattern("a" * 1001)
    with pytest.raises(InvalidInput):
        compile_pattern(r"(a)\1")  # back-references: not a linear-time construct
