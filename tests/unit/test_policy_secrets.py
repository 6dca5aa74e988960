"""Secrets follow code, not names: a policy file granting a secret to a user tool without its
`tool_hash`, or to a built-in (code_exec and terminal run whatever their caller sends), is
refused by the loader and by `navi policy check`; the engine hands a grant only to the code
it pins. Real YAML files in tmp_path, the real CLI app."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from runtime.cli import app
from runtime.policy import Action, PolicyEngine, PolicyFile, PolicyFileError, Subject, load_policy
from runtime.policy.model import MCP_GROUP, USER_TOOLS_GROUP

HASH = "ab" * 32
OTHER = "cd" * 32
runner = CliRunner()


def policy(tools: str) -> str:
    return f"""version: 1
mcp_servers:
  crm: {{command: [python3, /opt/crm.py], image: python}}
profiles:
  p:
    allow: [group:exec, group:web, group:user_tools, group:mcp]
    tools:
{tools}
tenants:
  "*": {{profiles: [p]}}
"""


def write(tmp_path: Path, tools: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(policy(tools))
    return path


@pytest.mark.parametrize("tool, says", [
    ("my_crm", "needs its tool_hash"),
    ("code_exec", "runs whatever code its caller sends"),
    ("terminal", "runs whatever code its caller sends"),
    ("http_request", "built-in tool http_request"),
])
def test_the_loader_refuses_a_grant_that_follows_a_name(
        tmp_path: Path, tool: str, says: str) -> None:
    path = write(tmp_path, f"      {tool}:\n        secrets: {{CRM_KEY: crm_key}}\n")
    with pytest.raises(PolicyFileError) as info:
        load_policy(path)
    [problem] = info.value.problems
    assert problem["path"] == f"profiles.p.tools.{tool}.secrets" and says in problem["message"]
    assert problem["line"] == 9  # the `secrets:` line
    assert str(info.value).startswith(f"{path}:9:9: profiles.p.tools.{tool}.secrets: ")


def test_a_hash_does_not_make_code_exec_a_place_for_secrets(tmp_path: Path) -> None:
    path = write(tmp_path, "      code_exec:\n        secrets: {K: k}\n"
                           f'        tool_hash: "{HASH}"\n')
    with pytest.raises(PolicyFileError, match="runs whatever code its caller sends"):
        load_policy(path)


def test_pinned_user_tools_and_declared_mcp_tools_load(tmp_path: Path) -> None:
    path = write(tmp_path, f'      my_crm:\n        secrets: {{CRM_KEY: crm_key}}\n'
                           f'        tool_hash: "{HASH}"\n'
                           '      crm__search:\n        secrets: {CRM_KEY: crm_key}\n'
                           '      code_exec:\n        languages: [python]\n')
    tools = load_policy(path).profiles["p"].tools
    assert tools["my_crm"].tool_hash == HASH and tools["crm__search"].secrets


def test_a_grant_to_an_undeclared_server_s_tool_is_a_user_tool_s(tmp_path: Path) -> None:
    path = write(tmp_path, "      ghost__search:\n        secrets: {K: k}\n")
    with pytest.raises(PolicyFileError, match="user tool ghost__search needs its tool_hash"):
        load_policy(path)


def test_shipped_policies_still_load() -> None:
    for path in sorted((Path(__file__).resolve().parents[2] / "policies").glob("*.yaml")):
        load_policy(path)


def test_navi_policy_check_fails_naming_the_grant(tmp_path: Path) -> None:
    path = write(tmp_path, "      my_crm:\n        secrets: {CRM_KEY: crm_key}\n"
                           "      terminal:\n        secrets: {CRM_KEY: crm_key}\n")
    result = runner.invoke(app, ["policy", "check", str(path)])
    assert result.exit_code == 2 and "ok" not in result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"{path}:9:9: profiles.p.tools.my_crm.secrets: a secret "
                               "granted to the user tool my_crm needs its tool_hash")
    assert lines[1].startswith(f"{path}:11:9: profiles.p.tools.terminal.secrets: a secret "
                               "cannot be granted to terminal")


def subject() -> Subject:
    return Subject(tenant="t1", profile="p", session="s1")


def engine_for(tools: dict[str, object]) -> PolicyEngine:
    """A policy built without the loader's checks: the engine must hold the line itself."""
    return PolicyEngine(PolicyFile.model_validate({
        "version": 1,
        "mcp_servers": {"crm": {"command": ["python3", "/opt/crm.py"], "image": "python"}},
        "profiles": {"p": {"allow": ["group:exec", "group:user_tools", "group:mcp"],
                           "tools": tools}},
        "tenants": {"*": {"profiles": ["p"]}}}))


def test_the_engine_hands_a_grant_only_to_the_code_it_pins() -> None:
    grant = {"secrets": {"CRM_KEY": "crm_key"}}
    eng = engine_for({"my_crm": {**grant, "tool_hash": HASH}, "loose": grant,
                      "code_exec": grant, "crm__search": grant})
    user_tool = Action(tool="my_crm", group=USER_TOOLS_GROUP, tool_hash=HASH)
    assert eng.decide(subject(), user_tool).secrets == {"CRM_KEY": "crm_key"}
    rewritten = user_tool.model_copy(update={"tool_hash": OTHER})
    assert eng.decide(subject(), rewritten).secrets == {}
    assert eng.decide(subject(), Action(tool="loose", group=USER_TOOLS_GROUP,
                                        tool_hash=HASH)).secrets == {}
    assert eng.decide(subject(), Action(tool="code_exec", args={"language": "bash"})
                      ).secrets == {}
    # the MCP server's own call gets its grant; a user tool wearing its name does not
    assert eng.decide(subject(), Action(tool="crm__search", group=MCP_GROUP)).secrets
    impostor = Action(tool="crm__search", group=USER_TOOLS_GROUP, tool_hash=OTHER)
    decision = eng.decide(subject(), impostor)
    assert decision.allowed and decision.secrets == {}
