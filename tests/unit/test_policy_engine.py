"""PolicyEngine.decide: rule ids, limits, approvals, roles, tenants, and each shipped policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.policy import Action, PolicyEngine, Subject, TenantOverlay, parse_policy
from runtime.policy.model import GROUPS

ROOT = Path(__file__).resolve().parents[2]


def engine(name: str) -> PolicyEngine:
    return PolicyEngine.from_file(ROOT / "policies" / name)


def decide(eng: PolicyEngine, tool: str, tenant: str = "local", **kw: object):
    subject_kw = {k: kw.pop(k) for k in ("role", "profile") if k in kw}
    return eng.decide(Subject(tenant=tenant, **subject_kw), Action(tool=tool, **kw))


# -- default.yaml ------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "tool,args",
    [("code_exec", {"language": "python"}), ("code_exec", {"language": "bash"}),
     ("terminal", {}), ("filesystem", {}), ("memory", {}), ("todo", {}), ("scratchpad", {}),
     ("list_tools", {}), ("write_tool", {}), ("reload_tools", {}), ("model_3d", {})],
)
def test_default_developer_allows(tool: str, args: dict) -> None:
    d = decide(engine("default.yaml"), tool, args=args)
    assert d.verdict == "allow", d
    assert d.rule.startswith("profiles.developer.allow[")


def test_default_user_tool_allowed_and_runs_in_tools_runner() -> None:
    d = decide(engine("default.yaml"), "my_tool", group="user_tools")
    assert (d.verdict, d.rule, d.image) == ("allow", "profiles.developer.allow[group:user_tools]",
                                            "tools-runner")


@pytest.mark.parametrize("tool", sorted(GROUPS["group:web"]))
def test_default_web_is_denied_with_its_rule(tool: str) -> None:
    d = decide(engine("default.yaml"), tool)
    assert (d.verdict, d.rule) == ("deny", "profiles.developer.deny[group:web]")


def test_default_images_and_limits() -> None:
    d = decide(engine("default.yaml"), "code_exec", args={"language": "python"})
    assert d.image == "python" and d.network == "none" and d.egress_allowlist == []
    lim = d.limits
    assert (lim.timeout_s, lim.memory_mb, lim.pids, lim.cpus, lim.tmp_mb, lim.output_bytes) == (
        30, 512, 256, 1.0, 64, 1024 * 1024)
    assert decide(engine("default.yaml"), "model_3d").image == "openscad"
    assert decide(engine("default.yaml"), "memory").image is None


def test_default_other_language_denied() -> None:
    d = decide(engine("default.yaml"), "code_exec", args={"language": "ruby"})
    assert (d.verdict, d.rule) == ("deny", "profiles.developer.tools.code_exec.languages")


def test_timeout_requested_is_clamped_to_max() -> None:
    eng = engine("default.yaml")
    assert decide(eng, "terminal", timeout_s=5).limits.timeout_s == 5
    assert decide(eng, "terminal", timeout_s=299).limits.timeout_s == 299
    assert decide(eng, "terminal", timeout_s=10_000).limits.timeout_s == 300
    assert decide(eng, "terminal", timeout_s=-1).limits.timeout_s == 30
    assert decide(eng, "terminal", timeout_s=float("nan")).limits.timeout_s == 30


def test_roles() -> None:
    eng = engine("default.yaml")
    d = decide(eng, "code_exec", role="auditor", args={"language": "python"})
    assert (d.verdict, d.rule) == ("deny", "roles.auditor.run_tools")
    assert eng.permits("auditor", "read_audit") and not eng.permits("auditor", "run_tools")
    assert eng.permits("admin", "manage") and not eng.permits("user", "manage")
    # server_admin is for admin tokens only, and only the operator tenant is offered it
    d = decide(eng, "terminal", tenant="admin", profile="server_admin")
    assert (d.verdict, d.rule) == ("deny", "profiles.server_admin.roles")
    d = decide(eng, "terminal", tenant="admin", profile="server_admin", role="tenant_admin")
    assert (d.verdict, d.rule) == ("deny", "profiles.server_admin.roles")
    d = decide(eng, "terminal", profile="server_admin", role="admin")
    assert (d.verdict, d.rule) == ("deny", "tenants.*.profiles")
    d = decide(eng, "terminal", tenant="admin", profile="server_admin", role="admin")
    assert d.verdict == "allow" and d.limits.timeout_s == 120 and d.limits.memory_mb == 1024
    assert decide(eng, "terminal", role="tenant_admin").verdict == "allow"


def test_secretary_runs_no_code() -> None:
    eng = engine("default.yaml")
    d = decide(eng, "code_exec", profile="secretary")
    assert d.rule == "profiles.secretary.deny[group:exec]"
    assert decide(eng, "filesystem", profile="secretary").verdict == "allow"
    assert decide(eng, "write_tool", profile="secretary").verdict == "deny"


def test_unknown_profile_and_unknown_tool() -> None:
    eng = engine("default.yaml")
    assert decide(eng, "terminal", profile="hacker").rule == "tenants.*.profiles"
    assert decide(eng, "rm_rf").rule == "default.deny"
    assert decide(eng, "Bad Name!").rule == "default.deny"
    # a tool cannot claim a built-in group to be allowed
    assert decide(eng, "evil", group="exec").rule == "default.deny"
    assert decide(eng, "evil", group="group:exec").rule == "default.deny"


def test_builtin_keeps_its_group_whatever_the_caller_says() -> None:
    d = decide(engine("default.yaml"), "http_request", group="user_tools")
    assert d.rule == "profiles.developer.deny[group:web]"


# -- strict.yaml -------------------------------------------------------------------------------

def test_strict() -> None:
    eng = engine("strict.yaml")
    d = decide(eng, "code_exec", args={"language": "python"}, timeout_s=1000)
    assert d.verdict == "allow" and d.limits.timeout_s == 60 and d.limits.memory_mb == 256
    assert d.network == "none"
    assert decide(eng, "code_exec", args={"language": "bash"}).verdict == "deny"
    assert decide(eng, "terminal").rule == "profiles.developer.deny[terminal]"
    d = decide(eng, "my_tool", group="user_tools", tool_hash="a", approved_hash="a")
    assert (d.verdict, d.rule) == ("ask", "profiles.developer.approvals[0]")
    assert decide(eng, "write_tool").verdict == "ask"
    assert eng.quotas("anyone").max_concurrent == 2


# -- lab.yaml ----------------------------------------------------------------------------------

def test_lab_tenants_and_quotas() -> None:
    eng = engine("lab.yaml")
    q = eng.quotas("physics")
    assert (q.max_concurrent, q.execs_per_minute, q.session_disk_mb) == (4, 60, 2048)
    q = eng.quotas("unknown-group")
    assert (q.max_concurrent, q.execs_per_minute) == (1, 10)
    assert eng.default_profile("physics") == "developer"
    assert eng.default_profile("stranger") == "student"
    # unassigned tenants get student only
    assert decide(eng, "terminal", tenant="stranger").rule == "tenants.*.profiles"
    d = decide(eng, "code_exec", tenant="stranger", profile="student",
               args={"language": "python"})
    assert d.verdict == "allow" and d.limits.memory_mb == 256
    # chemistry: the tenant entry denies terminal and lowers memory
    d = decide(eng, "terminal", tenant="chemistry")
    assert (d.verdict, d.rule) == ("deny", "tenants.chemistry.deny[terminal]")
    d = decide(eng, "code_exec", tenant="chemistry", args={"language": "python"})
    assert d.verdict == "allow" and d.limits.memory_mb == 128
    # physics: terminal with egress names only
    d = decide(eng, "terminal", tenant="physics")
    assert d.network == "egress" and d.egress_allowlist == ["pypi.org", "files.pythonhosted.org"]
    assert eng.permits("auditor", "read_audit")
    assert decide(eng, "code_exec", tenant="physics", role="auditor").verdict == "deny"


def test_lab_approvals() -> None:
    eng = engine("lab.yaml")
    kw = {"tenant": "physics", "group": "user_tools"}
    assert decide(eng, "t1", first_use=True, **kw).verdict == "ask"
    assert decide(eng, "t1", first_use=False, **kw).verdict == "allow"
    kw = {"tenant": "stranger", "profile": "student", "group": "user_tools"}
    assert decide(eng, "t1", tool_hash="h1", approved_hash=None, **kw).verdict == "ask"
    assert decide(eng, "t1", tool_hash="h1", approved_hash="h1", **kw).verdict == "allow"
    assert decide(eng, "t1", tool_hash="h2", approved_hash="h1", **kw).verdict == "ask"
    assert decide(eng, "t1", tool_hash=None, approved_hash=None, **kw).verdict == "ask"


# -- overlays and precedence -------------------------------------------------------------------

def test_explicit_deny_beats_allow() -> None:
    policy = parse_policy(
        "version: 1\nprofiles:\n  p:\n    allow: [terminal, group:exec]\n"
        "    deny: [terminal]\ntenants:\n  t: {profiles: [p]}\n"
    )
    eng = PolicyEngine(policy)
    assert decide(eng, "terminal", tenant="t", profile="p").rule == "profiles.p.deny[terminal]"
    assert decide(eng, "code_exec", tenant="t", profile="p").verdict == "allow"
    # no '*' entry: an unnamed tenant is denied
    assert decide(eng, "code_exec", tenant="other", profile="p").rule == "default.deny"


def test_overlay_tightens() -> None:
    eng = engine("default.yaml").with_overlay(
        "acme",
        TenantOverlay(allow=["code_exec", "filesystem"], deny=["filesystem"],
                      limits={"memory_mb": 64, "max_timeout_s": 10}, quotas={"max_concurrent": 1}),
    )
    assert decide(eng, "terminal", tenant="acme").rule == "overlays.acme.allow"
    assert decide(eng, "filesystem", tenant="acme").rule == "overlays.acme.deny[filesystem]"
    d = decide(eng, "code_exec", tenant="acme", args={"language": "python"}, timeout_s=60)
    assert d.verdict == "allow" and d.limits.memory_mb == 64 and d.limits.timeout_s == 10
    assert eng.quotas("acme").max_concurrent == 1
    # an overlay asking for more is ignored
    wide = engine("default.yaml").with_overlay(
        "acme", TenantOverlay(limits={"memory_mb": 4096}, quotas={"max_concurrent": 100}))
    assert decide(wide, "terminal", tenant="acme").limits.memory_mb == 512
    assert wide.quotas("acme").max_concurrent == 4
