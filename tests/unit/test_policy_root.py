"""Root inside a sandbox only under gVisor: the loader refuses `allow_root: true` without
`runtime: gvisor` in the same limits (file:line), the engine denies `terminal {user: root}`
unless the call's limits allow it, overlays only take it away, and neither the request nor
the container spec can be made with root on runc. Real YAML files in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from runtime.policy import Action, PolicyEngine, PolicyFileError, Subject, load_policy
from runtime.policy.model import TenantOverlay
from runtime.sandbox.docker.spec import ContainerSpec
from runtime.sandbox.models import ExecRequest, Limits

ROOT_ASK = Action(tool="terminal", args={"command": "id -u", "user": "root"})


def policy(limits: str, tool_limits: str = "{}") -> str:
    return f"""version: 1
profiles:
  p:
    allow: [group:exec]
    limits: {limits}
    tools:
      terminal: {{limits: {tool_limits}}}
  plain:
    allow: [group:exec]
tenants:
  "*": {{profiles: [p, plain]}}
"""


@pytest.mark.parametrize("limits", ["{allow_root: true}", "{allow_root: true, runtime: runc}"])
def test_the_loader_refuses_allow_root_on_runc(tmp_path: Path, limits: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(policy(limits))
    with pytest.raises(PolicyFileError) as info:
        load_policy(path)
    [problem] = info.value.problems
    assert problem["path"] == "profiles.p.limits" and problem["line"] == 5
    assert "allow_root: true needs runtime: gvisor" in problem["message"]
    assert f"{path}:5:" in str(info.value)


def engine(tmp_path: Path, tool_limits: str = "{}") -> PolicyEngine:
    path = tmp_path / "policy.yaml"
    path.write_text(policy("{runtime: gvisor, allow_root: true}", tool_limits))
    return PolicyEngine(load_policy(path))


def test_root_is_allowed_only_where_the_limits_say_so(tmp_path: Path) -> None:
    eng = engine(tmp_path)
    allowed = eng.decide(Subject(tenant="t", profile="p"), ROOT_ASK)
    assert allowed.allowed and allowed.limits.allow_root and allowed.limits.runtime == "gvisor"
    denied = eng.decide(Subject(tenant="t", profile="plain"), ROOT_ASK)
    assert not denied.allowed and denied.rule == "profiles.plain.limits.allow_root"
    assert eng.decide(Subject(tenant="t", profile="plain"),
                      Action(tool="terminal", args={"command": "id -u"})).allowed


def test_a_tool_rule_back_on_runc_loses_root(tmp_path: Path) -> None:
    eng = engine(tmp_path, "{runtime: runc}")
    denied = eng.decide(Subject(tenant="t", profile="p"), ROOT_ASK)
    assert not denied.allowed and denied.rule == "profiles.p.limits.allow_root"


def test_an_overlay_can_only_take_root_away(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(policy("{runtime: gvisor, allow_root: true}"))
    taken = PolicyEngine(load_policy(path), {"t": TenantOverlay.model_validate(
        {"limits": {"allow_root": False}})})
    assert not taken.decide(Subject(tenant="t", profile="p"), ROOT_ASK).allowed
    path.write_text(policy("{runtime: gvisor}"))
    granted = PolicyEngine(load_policy(path), {"t": TenantOverlay.model_validate(
        {"limits": {"allow_root": True, "runtime": "gvisor"}})})
    assert not granted.decide(Subject(tenant="t", profile="p"), ROOT_ASK).allowed


def test_no_root_request_or_spec_on_runc() -> None:
    with pytest.raises(ValidationError, match="allow_root under gvisor"):
        ExecRequest(argv=["id"], image="python", exec_id="e1", root=True,
                    limits=Limits(allow_root=True))  # runc
    ExecRequest(argv=["id"], image="python", exec_id="e1", root=True,
                limits=Limits(allow_root=True, runtime="gvisor"))
    spec = {"image": "sha256:x", "argv": ("id",), "env": {}, "workdir": "/workspace",
            "user": "0:0", "labels": {}, "seccomp_profile": "{}", "memory_bytes": 1,
            "pids_limit": 1, "nano_cpus": 1, "tmp_bytes": 1, "nofile": 1, "fsize_bytes": 1}
    with pytest.raises(ValidationError, match="only under gVisor"):
        ContainerSpec(**spec)
    assert ContainerSpec(**spec, runtime="runsc").user == "0:0"
