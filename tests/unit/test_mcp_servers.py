"""MCP servers a policy declares: the policy's shape and decisions, the relay that speaks to a
server (run here against the shipped demo server, written with the official SDK), and how a
listing becomes tools."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.config import PROJECT_ROOT
from runtime.errors import ConfigError
from runtime.policy import Action, PolicyEngine, Subject
from runtime.policy.loader import parse_policy
from runtime.policy.model import MCP_GROUP, McpServer
from runtime.tools.mcp.catalog import parse_listing
from runtime.tools.mcp.protocol import (
    RelayError,
    full_name,
    relay_answer,
    result_text,
    server_hash,
)

RELAY = PROJECT_ROOT / "sandbox_images" / "_shared" / "navi-mcp-call"
DEMO = PROJECT_ROOT / "sandbox_images" / "python" / "mcp" / "demo_server.py"

POLICY = """
version: 1
network: {egress_allowlist: [api.example.test]}
mcp_servers:
  demo: {command: [python3, -I, /opt/navi/mcp/demo_server.py], image: python,
         egress: [api.example.test]}
profiles:
  all: {roles: [user], allow: [group:mcp]}
  one: {roles: [user], allow: [demo__add]}
  none: {roles: [user], allow: [group:mcp], deny: [demo__reach]}
tenants:
  "*": {profiles: [all, one, none]}
"""


def engine(text: str = POLICY) -> PolicyEngine:
    return PolicyEngine(parse_policy(text, source="test.yaml"))


def subject(profile: str) -> Subject:
    return Subject(tenant="t1", role="user", profile=profile, session="s1")


def mcp(tool: str, **kw: object) -> Action:
    return Action(tool=tool, group=MCP_GROUP, **kw)  # type: ignore[arg-type]


def test_a_declared_server_s_tool_runs_in_its_image_with_its_hosts() -> None:
    d = engine().decide(subject("all"), mcp("demo__add"))
    assert d.verdict == "allow" and d.rule == "profiles.all.allow[group:mcp]"
    assert d.image == "python" and d.egress_allowlist == ["api.example.test"]


def test_an_undeclared_server_is_denied_whatever_the_profile_allows() -> None:
    d = engine().decide(subject("all"), mcp("ghost__add"))
    assert d.verdict == "deny" and d.rule == "mcp_servers"


def test_listing_is_allowed_where_one_of_the_server_s_tools_is() -> None:
    eng = engine()
    assert eng.decide(subject("one"), mcp("demo__")).verdict == "allow"
    assert eng.decide(subject("one"), mcp("demo__add")).verdict == "allow"
    assert eng.decide(subject("one"), mcp("demo__reach")).verdict == "deny"
    denied = eng.decide(subject("none"), mcp("demo__reach"))
    assert denied.verdict == "deny" and denied.rule == "profiles.none.deny[demo__reach]"


def test_a_user_tool_cannot_borrow_an_mcp_server_s_image() -> None:
    d = engine().decide(subject("all"), Action(tool="demo__add", group="group:user_tools"))
    assert d.verdict == "deny"  # group:user_tools is not allowed; no MCP image either


@pytest.mark.parametrize("entry, problem", [
    ("bad__name: {command: [x], image: python}", "not a server name"),
    ("demo: {command: [x], image: python, egress: [other.test]}", "egress_allowlist"),
    ("demo: {command: [], image: python}", "at least 1"),
    ("demo: {command: [x], image: python, shell: true}", "Extra inputs"),
    ("demo: {command: [x], image: 'Bad Image'}", "image name"),
])
def test_bad_server_entries_are_refused_with_their_location(entry: str, problem: str) -> None:
    text = POLICY.split("mcp_servers:")[0] + "mcp_servers:\n  " + entry + "\n"
    text += "profiles: {p: {roles: [user], allow: [group:mcp]}}\ntenants: {'*': {profiles: [p]}}\n"
    with pytest.raises(ConfigError) as info:
        parse_policy(text, source="bad.yaml")
    assert problem in str(info.value) and "mcp_servers" in str(info.value)


def test_the_server_hash_covers_image_and_command() -> None:
    a = McpServer(command=["python3", "s.py"], image="python")
    assert server_hash(a) != server_hash(McpServer(command=["python3", "t.py"], image="python"))
    assert server_hash(a) != server_hash(McpServer(command=["python3", "s.py"], image="other"))
    assert len(server_hash(a)) == 64


def test_names_navi_cannot_take_are_left_out() -> None:
    assert full_name("demo", "add") == "demo__add"
    assert full_name("demo", "Add") is None and full_name("demo", "a-b") is None
    assert full_name("demo", "x__y") is None and full_name("demo", "a" * 70) is None


def test_relay_answers_are_parsed_strictly() -> None:
    assert relay_answer(b'noise\n{"ok": true, "tools": []}\n')["tools"] == []
    for bad, message in [(b"", "no answer"), (b"{", "not JSON"), (b"[1]", "malformed"),
                         (b'{"ok": false, "error": "boom"}', "boom")]:
        with pytest.raises(RelayError, match=message):
            relay_answer(bad)
    assert result_text({"content": [{"type": "text", "text": "a"},
                                    {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
                        "isError": True}) == (True, "a\n[image: image/png, about 3 bytes]")
    assert result_text({"content": [], "structuredContent": {"n": 1}}) == (False, '{"n": 1}')


def test_a_listing_keeps_usable_tools_and_says_why_others_are_out() -> None:
    server = McpServer(command=["x"], image="python")
    state = parse_listing("demo", server, {"tools": [
        {"name": "add", "description": "Add.", "inputSchema": {"type": "object"}},
        {"name": "Bad-Name", "inputSchema": {"type": "object"}},
        {"name": "regex", "inputSchema": {"type": "object", "properties": {
            "s": {"type": "string", "pattern": "(a+)+$"}}}},
        {"name": "noschema"},
        "junk",
    ]})
    assert sorted(state.tools) == ["demo__add"]
    assert set(state.skipped) == {"Bad-Name", "regex", "noschema"}
    assert "pattern" in state.skipped["regex"]
    tool = state.tools["demo__add"]
    assert tool.group == MCP_GROUP and tool.server_hash == server_hash(server)


def relay(*args: str, stdin: bytes = b"", command: list[str] | None = None) -> dict:
    command = command or [sys.executable, "-I", str(DEMO)]
    proc = subprocess.run([sys.executable, "-I", str(RELAY), *args, "--", *command],
                          input=stdin, capture_output=True, timeout=60, check=False)
    return json.loads(proc.stdout.decode().strip().splitlines()[-1]) | {
        "_stderr": proc.stderr.decode(), "_code": proc.returncode}


def test_the_relay_lists_and_calls_the_demo_server(tmp_path: Path) -> None:
    listed = relay("list")
    assert listed["ok"] and listed["server"]["name"] == "demo"
    names = {t["name"] for t in listed["tools"]}
    assert {"add", "count_words", "workspace_files", "countdown", "reach"} <= names
    added = relay("call", "add", stdin=b'{"a": 2, "b": 3.5}')
    assert added["ok"] and result_text(added["result"]) == (False, "5.5")
    counted = relay("call", "countdown", stdin=b'{"n": 2}')
    assert result_text(counted["result"]) == (False, "lift-off")
    assert "[mcp] progress 2/2" in counted["_stderr"]  # progress reaches the live output


def test_the_relay_reports_tool_errors_and_dead_servers() -> None:
    bad = relay("call", "add", stdin=b'{"a": 1}')
    assert bad["ok"] and result_text(bad["result"])[0] is True
    unknown = relay("call", "nope", stdin=b"{}")
    assert (unknown["ok"] and result_text(unknown["result"])[0]) or not unknown["ok"]
    dead = relay("list", command=[sys.executable, "-c", "print('not json'); raise SystemExit(3)"])
    assert not dead["ok"] and "exited (code 3)" in dead["error"] and dead["_code"] == 1
    missing = relay("list", command=["/nonexistent/server"])
    assert not missing["ok"] and "cannot start" in missing["error"]
