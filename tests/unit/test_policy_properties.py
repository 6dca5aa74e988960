"""Hypothesis: overlays only tighten, unknown tools are denied, an explicit deny beats allow."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.policy import Action, PolicyEngine, PolicyFile, Subject, TenantOverlay
from runtime.policy.model import ALL_GROUPS, BUILTIN_TOOLS, TOOL_GROUP

ROOT = Path(__file__).resolve().parents[2]
ENGINES = {n: PolicyEngine.from_file(ROOT / "policies" / n)
           for n in ("default.yaml", "strict.yaml", "lab.yaml")}
STRICTNESS = {"allow": 0, "ask": 1, "deny": 2}
TOOLS = sorted(BUILTIN_TOOLS) + ["my_tool", "other_tool"]
REFS = TOOLS + sorted(ALL_GROUPS)
LIMIT_BOUNDS = {
    "timeout_s": st.floats(0.5, 300), "max_timeout_s": st.floats(0.5, 300),
    "memory_mb": st.integers(16, 8192), "pids": st.integers(8, 4096),
    "cpus": st.floats(0.1, 8), "tmp_mb": st.integers(1, 4096),
    "output_bytes": st.integers(1024, 16 * 1024 * 1024), "nofile": st.integers(16, 65536),
    "fsize_mb": st.integers(1, 4096),
}

subjects = st.builds(
    Subject,
    tenant=st.sampled_from(["local", "physics", "chemistry", "acme"]),
    role=st.sampled_from(["user", "admin", "auditor"]),
    profile=st.sampled_from(["developer", "secretary", "server_admin", "student", "nope"]),
)
actions = st.builds(
    Action,
    tool=st.sampled_from(TOOLS),
    group=st.sampled_from([None, "user_tools", "exec"]),
    args=st.fixed_dictionaries({"language": st.sampled_from(["python", "bash", "ruby"])}),
    timeout_s=st.none() | st.floats(-10, 1000, allow_nan=False),
    tool_hash=st.sampled_from([None, "h1", "h2"]),
    approved_hash=st.sampled_from([None, "h1"]),
    first_use=st.booleans(),
)
approvals = st.lists(
    st.fixed_dictionaries({
        "tools": st.lists(st.sampled_from(REFS), min_size=1, max_size=3),
        "when": st.sampled_from(["always", "first_use", "hash_change"]),
    }),
    max_size=2,
)
overlays = st.builds(
    TenantOverlay,
    allow=st.none() | st.lists(st.sampled_from(REFS), max_size=6),
    deny=st.lists(st.sampled_from(REFS), max_size=4),
    approvals=approvals,
    limits=st.fixed_dictionaries({}, optional=LIMIT_BOUNDS),
    egress=st.none() | st.lists(st.sampled_from(["pypi.org", "files.pythonhosted.org"])),
    quotas=st.fixed_dictionaries({}, optional={
        "max_concurrent": st.integers(1, 64), "execs_per_minute": st.integers(1, 1000),
        "session_disk_mb": st.integers(16, 8192), "upload_mb": st.integers(1, 1000)}),
)


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(sorted(ENGINES)), subject=subjects, action=actions, overlay=overlays)
def test_an_overlay_never_widens(name, subject, action, overlay) -> None:
    base = ENGINES[name]
    tight = base.with_overlay(subject.tenant, overlay)
    before, after = base.decide(subject, action), tight.decide(subject, action)
    assert STRICTNESS[after.verdict] >= STRICTNESS[before.verdict], (before, after)
    if after.verdict != "deny":
        for key, value in after.limits.model_dump().items():
            assert value <= getattr(before.limits, key), key
        assert set(after.egress_allowlist) <= set(before.egress_allowlist)
        assert after.image == before.image
    q_before, q_after = base.quotas(subject.tenant), tight.quotas(subject.tenant)
    for key, value in q_after.model_dump().items():
        assert value <= getattr(q_before, key), key


unknown_names = st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True).filter(
    lambda n: n not in BUILTIN_TOOLS)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(ENGINES)), subject=subjects, tool=unknown_names,
       group=st.sampled_from([None, "exec", "group:exec", "fs", "web", "meta", ""]))
def test_unknown_tools_are_denied(name, subject, tool, group) -> None:
    """A tool that is neither built in nor a declared user tool is never allowed."""
    d = ENGINES[name].decide(subject, Action(tool=tool, group=group))
    assert d.verdict == "deny"


@settings(max_examples=200, deadline=None)
@given(tool=st.text(max_size=80).filter(lambda t: t not in BUILTIN_TOOLS))
def test_junk_tool_names_are_denied(tool) -> None:
    d = ENGINES["default.yaml"].decide(Subject(tenant="t"), Action(tool=tool))
    assert d.verdict == "deny"


@settings(max_examples=400, deadline=None)
@given(
    allow=st.lists(st.sampled_from(REFS), max_size=8),
    deny=st.lists(st.sampled_from(REFS), min_size=1, max_size=4),
    tool=st.sampled_from(TOOLS),
    user_tool=st.booleans(),
)
def test_explicit_deny_beats_allow(allow, deny, tool, user_tool) -> None:
    policy = PolicyFile.model_validate({
        "version": 1,
        "profiles": {"p": {"allow": allow, "deny": deny}},
        "tenants": {"*": {"profiles": ["p"]}},
    })
    group = "user_tools" if user_tool else None
    subject = Subject(tenant="t", profile="p")
    d = PolicyEngine(policy).decide(subject, Action(tool=tool, group=group))
    effective_group = PolicyEngine.tool_group(tool, group)
    denied = tool in deny or (effective_group is not None and effective_group in deny)
    named = tool in allow or (effective_group is not None and effective_group in allow)
    if denied:
        assert d.verdict == "deny" and d.rule.startswith("profiles.p.deny[")
    elif named:
        assert d.verdict == "allow"
    else:
        assert (d.verdict, d.rule) == ("deny", "default.deny")
    if tool in TOOL_GROUP:
        assert effective_group == TOOL_GROUP[tool]
