"""`ssh_exec`'s key follows the tool, not a name: the policy's `ssh` block (key secret, user,
pinned host keys) loads only on `ssh_exec`'s rule, and the engine hands the key's name (the
Recorder's `stdin_secret`) to `ssh_exec` alone, even from a file that skipped the loader.
Real YAML files in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.policy import Action, PolicyEngine, PolicyFile, PolicyFileError, Subject, load_policy
from runtime.policy.model import USER_TOOLS_GROUP

PINNED = "[lab.example]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIRx+5CJIuZujl+OhWKqCqBY"
SSH = {"key_secret": "lab_key", "user": "ops", "known_hosts": [PINNED]}


def policy(tool: str, known: str = PINNED) -> str:
    return f"""version: 1
network: {{egress_allowlist: [lab.example]}}
profiles:
  p:
    allow: [group:exec, group:remote, group:user_tools]
    tools:
      {tool}:
        ssh: {{key_secret: lab_key, known_hosts: ["{known}"]}}
tenants:
  "*": {{profiles: [p]}}
"""


@pytest.mark.parametrize("tool", ["code_exec", "terminal", "my_tool"])
def test_the_loader_refuses_ssh_on_another_tool(tmp_path: Path, tool: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(policy(tool))
    with pytest.raises(PolicyFileError) as info:
        load_policy(path)
    [problem] = info.value.problems
    assert problem["path"] == f"profiles.p.tools.{tool}.ssh"
    assert "ssh applies to ssh_exec only" in problem["message"]


@pytest.mark.parametrize("line", [
    "lab.example ssh-ed25519 AAAA\\nevil ssh-ed25519 BBBB",  # a second line smuggled in
    '@cert-authority * ssh-ed25519 AAAA',  # options: a CA would trust every host
    "|1|hashed|name= ssh-ed25519 AAAA",
])
def test_a_pinned_key_is_one_plain_known_hosts_line(tmp_path: Path, line: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(policy("ssh_exec", line))
    with pytest.raises(PolicyFileError, match="one known_hosts line"):
        load_policy(path)


def test_ssh_exec_s_rule_loads(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(policy("ssh_exec"))
    rule = load_policy(path).profiles["p"].tools["ssh_exec"]
    assert rule.ssh is not None and rule.ssh.known_hosts == [PINNED]


def test_the_engine_hands_the_key_to_ssh_exec_only() -> None:
    """A policy built without the loader's checks: the engine must hold the line itself."""
    rule = {"ssh": SSH}
    eng = PolicyEngine(PolicyFile.model_validate({
        "version": 1,
        "profiles": {"p": {"allow": ["group:exec", "group:remote", "group:user_tools"],
                           "tools": {"ssh_exec": rule, "code_exec": rule, "my_tool": rule}}},
        "tenants": {"*": {"profiles": ["p"]}}}))
    subject = Subject(tenant="t1", profile="p", session="s1")
    ssh = eng.decide(subject, Action(tool="ssh_exec", group="group:remote"))
    assert ssh.allowed and ssh.stdin_secret == "lab_key" and ssh.ssh_user == "ops"
    assert ssh.known_hosts == (PINNED,) and ssh.secrets == {}
    for action in (Action(tool="code_exec", args={"language": "bash"}),
                   Action(tool="my_tool", group=USER_TOOLS_GROUP, tool_hash="ab" * 32)):
        decision = eng.decide(subject, action)
        assert decision.allowed and decision.stdin_secret is None
        assert decision.known_hosts == ()
