"""An agent's working day, end to end (issue 18's "done when"): through a real `navi serve`
and the fake model, one session edits a file by a unique match, reads back a PDF it made,
runs a command past the 30 s default with `timeout_s`, delegates a sub-task to
`spawn_agent`, and calls the shipped user tool `weather_now`, which reaches a scripted API
on 127.0.0.1 through the egress proxy with a key it never contains (stored with the secrets
API, granted by the policy). Every one of those calls is in the audit, and the chain
verifies. The key shows up nowhere but at the API: no event, audit record, log line.

Egress: the policy grants the IP literal 127.0.0.1 (an allowlisted literal is never looked
up, so no DNS query is made) on the API's port only, and the server lets the proxy reach
loopback (NAVI_EGRESS_ALLOW_LOOPBACK, tests only). Nothing here talks to another address."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from tests.docker.test_agent_tools import MAKE_PDF
from tests.docker.test_tool_secrets import TOOL, TOOL_HASH
from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_agent_api import audit_of, new_session, one, send, watch
from tests.fakes.json_api import json_api
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

pytestmark = pytest.mark.docker

KEY = "wx-WORKDAY-" + secrets.token_hex(12)  # fresh per run: found only if it leaked
PROFILE = """description: workday test agent
max_iterations: 6
context_window: 16384
tools: [group:exec, group:fs, group:meta, group:user_tools]
system_prompt: You are the test agent.
"""


def policy(tool_hash: str) -> str:
    return f"""
version: 1
defaults:
  limits: {{timeout_s: 30, max_timeout_s: 90}}
  quotas: {{max_concurrent: 4, execs_per_minute: 1000}}
images:
  code_exec: python
  terminal: python
  read_document: python
  group:user_tools: tools-runner
network: {{egress_allowlist: [127.0.0.1]}}
roles:
  user: {{run_tools: true}}
  auditor: {{read_audit: true}}
  tenant_admin: {{run_tools: true, read_audit: true, manage: true}}
  admin: {{run_tools: true, read_audit: true, manage: true}}
profiles:
  developer:
    roles: [user, tenant_admin, admin]
    allow: [group:exec, group:fs, group:meta, group:user_tools]
    tools:
      code_exec: {{languages: [python, bash]}}
      weather_now:
        network: egress
        egress: [127.0.0.1]
        secrets: {{WEATHER_API_KEY: weather_key}}
        tool_hash: "{tool_hash}"
tenants:
  "*": {{profiles: [developer], default_profile: developer}}
"""


@dataclass
class WeatherApi:
    port: int = 0
    seen: list[tuple[str | None, str]] = field(default_factory=list)  # (key, path)


@pytest.fixture(scope="module")
def weather() -> Iterator[WeatherApi]:
    state = WeatherApi()

    def answer(request: BaseHTTPRequestHandler) -> tuple[int, Any]:
        key = request.headers.get("X-Api-Key")
        state.seen.append((key, request.path))
        if key == KEY:
            return 200, {"temp_c": 17.5, "summary": "breezy"}
        return 401, {"error": "bad key"}

    with json_api(answer) as state.port:
        yield state


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, ollama: FakeOllama,
           weather: WeatherApi) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("workday")
    profiles = tmp / "profiles"
    profiles.mkdir()
    (profiles / "developer.yaml").write_text(PROFILE)
    policy_file = tmp / "policy.yaml"
    policy_file.write_text(policy(TOOL_HASH))
    srv = start_server(tmp, policy=policy_file, extra_env={
        "NAVI_OLLAMA_HOST": ollama.url, "NAVI_PROFILES_DIR": str(profiles),
        "NAVI_MODEL": "gemma3:270m", "NAVI_OPENAI_BASE_URL": "", "NAVI_EMBEDDED_MODEL": "off",
        "NAVI_EGRESS_ALLOW_LOOPBACK": "1", "NAVI_EGRESS_PORTS": json.dumps([weather.port])})
    yield srv
    stop_server(srv)


@dataclass
class Day:
    """One session of one user; `turn` sends a message and returns that turn's events."""

    server: Server
    ollama: FakeOllama
    user: str
    session: str
    events: list[dict[str, Any]] = field(default_factory=list)

    def turn(self, message: str, *replies: Any) -> list[dict[str, Any]]:
        self.ollama.model.add(*replies)
        after = self.events[-1]["_id"] if self.events else 0
        send(self.server, self.user, self.session, message)
        got = watch(self.server, self.user, self.session, after=after, timeout=90)
        self.events += got
        assert got[-1]["type"] == "stream_end" and got[-1]["stop_reason"] == "stop", got[-1]
        assert self.ollama.model.remaining() == 0, "the scripted replies were not all used"
        return got

    def file(self, path: str) -> bytes:
        with self.server.client(self.user) as client:
            resp = client.get(f"/v1/sessions/{self.session}/files/{path}")
        assert resp.status_code == 200, resp.text
        return resp.content


def results(events: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "tool_result" and e["tool"] == tool]


def raw_stream(server: Server, token: str, session: str, up_to: int) -> str:
    """The session's SSE stream as sent (replayed from the start), up to event `up_to`."""
    lines: list[str] = []
    with server.client(token) as client, client.stream(
            "GET", f"/v1/sessions/{session}/events", params={"after": 0}) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            lines.append(line)
            if line == "" and f"id: {up_to}" in lines:
                break
    return "\n".join(lines)


def answer_quoting_the_tool(prefix: str) -> Any:
    return lambda req: Reply(content=prefix + req["messages"][-1]["content"])


@pytest.mark.slow
def test_a_scripted_workday_is_done_in_sandboxes_and_all_in_the_audit(
        server: Server, ollama: FakeOllama, weather: WeatherApi) -> None:
    tenant, user = server.tenant_with_user()
    auditor = server.token_for(tenant, "auditor")
    manager = server.token_for(tenant, "tenant_admin")
    day = Day(server, ollama, user, new_session(server, user))

    # 1. write a file, then edit it by a unique match: the changed line comes back numbered
    config = "name = demo\nmode = draft\nretries = 3\n"
    edit = {"path": "app.cfg", "old": "mode = draft", "new": "mode = final"}
    events = day.turn(
        "finalise app.cfg",
        Reply(calls=[Call("filesystem", {"action": "write", "path": "app.cfg",
                                         "content": config})]),
        Reply(calls=[Call("edit_file", edit)]),
        answer_quoting_the_tool("done: "))
    (edited,) = results(events, "edit_file")
    assert edited["success"] is True, edited
    assert edited["output"].startswith("edited app.cfg (lines 2-2):")
    assert "2\tmode = final" in edited["output"].splitlines()
    assert day.file("app.cfg") == b"name = demo\nmode = final\nretries = 3\n"

    # 2. make a PDF with matplotlib in the sandbox, then read it back with read_document
    events = day.turn(
        "chart the quarter as report.pdf and read it back",
        Reply(calls=[Call("code_exec", {"language": "python", "code": MAKE_PDF})]),
        Reply(calls=[Call("read_document", {"path": "report.pdf"})]),
        answer_quoting_the_tool("the report says: "))
    (made,) = results(events, "code_exec")
    assert made["success"] is True, made
    assert day.file("report.pdf").startswith(b"%PDF")
    (doc,) = results(events, "read_document")
    assert doc["success"] is True, doc
    assert "Quarterly total 21" in doc["output"] and "Quarterly total 42" in doc["output"]

    # 3. a command longer than the 30 s default, with timeout_s: it finishes
    events = day.turn(
        "run the long job",
        Reply(calls=[Call("terminal", {"command": "sleep 31; echo done-long",
                                       "timeout_s": 60})]),
        answer_quoting_the_tool("job: "))
    (long_run,) = results(events, "terminal")
    assert long_run["success"] is True and long_run["timed_out"] is False, long_run
    assert long_run["output"] == "done-long\n" and long_run["timeout_s"] == 60
    assert long_run["duration_ms"] >= 31000

    # 4. a sub-task delegated to a sub-agent (same fake model): one call of its own, an answer
    events = day.turn(
        "delegate the arithmetic",
        Reply(calls=[Call("spawn_agent", {"task": "compute 6*7 in the sandbox"})]),  # parent
        Reply(calls=[Call("code_exec", {"language": "python",
                                        "code": "print(6 * 7)"})]),             # sub-agent
        answer_quoting_the_tool("the sub-agent computed "),                     # sub-agent
        answer_quoting_the_tool("delegated: "))                                 # parent
    parent_turn = one(events, "stream_start")["turn_id"]
    (spawned,) = results(events, "spawn_agent")
    assert spawned["success"] is True, spawned
    assert spawned["output"].startswith("the sub-agent computed") and "42" in spawned["output"]
    inner = [e["event"] for e in events if e["type"] == "subagent"]
    (sub_exec,) = [i for i in inner if i["type"] == "tool_result"]
    assert sub_exec["tool"] == "code_exec" and sub_exec["output"] == "42\n"
    assert events[-1]["content"].startswith("delegated: the sub-agent computed")

    # 5. the shipped user tool reaches the API with a key it never contains
    assert KEY.encode() not in TOOL.read_bytes()
    with server.client(manager) as client:
        stored = client.put(f"/v1/tenants/{tenant}/secrets/weather_key", json={"value": KEY})
    assert stored.status_code == 204, stored.text
    endpoint = f"http://127.0.0.1:{weather.port}/v1/current"
    events = day.turn(
        "what is the weather in Bergen?",
        Reply(calls=[Call("weather_now", {"city": "Bergen", "endpoint": endpoint})]),
        answer_quoting_the_tool("weather: "))
    (forecast,) = results(events, "weather_now")
    assert forecast["success"] is True, forecast
    assert forecast["output"] == "Bergen: 17.5 °C, breezy"
    assert weather.seen == [(KEY, "/v1/current?city=Bergen")]  # the API saw the key

    # 6. all in the audit: every execution has its intent and outcome, the writes their
    # file.write; the sub-agent's call names the parent turn; the chain verifies
    records = audit_of(server, auditor, day.session)
    writes = [r for r in records if r["action"] == "file.write" and r["object"] == "app.cfg"]
    assert [(r["kind"], r["detail"]) for r in writes][-1] == ("action", "edit_file")
    assert len(writes) == 2  # the filesystem write, then the edit
    execs = {"code_exec": made, "read_document": doc, "terminal": long_run,
             "weather_now": forecast, "sub-agent code_exec": sub_exec}
    for name, result in execs.items():
        mine = [r for r in records if r["exec_id"] == result["exec_id"]]
        assert [r["kind"] for r in mine] == ["intent", "outcome"], (name, mine)
        assert all(r["action"] == "exec" and r["tool"] == result["tool"] for r in mine), mine
        assert all(r["session"] == day.session for r in mine), mine
        assert mine[-1]["exit_code"] == 0, (name, mine)
        expected_parent = parent_turn if name.startswith("sub-agent") else None
        assert all(r["parent_turn"] == expected_parent for r in mine), (name, mine)
    terminal_intent = next(r for r in records if r["exec_id"] == long_run["exec_id"])
    assert terminal_intent["limits"]["timeout_s"] == 60
    weather_intent = next(r for r in records if r["exec_id"] == forecast["exec_id"])
    assert weather_intent["secrets"] == ["weather_key"]
    assert weather_intent["tool_hash"] == TOOL_HASH
    assert weather_intent["image"].startswith("navi/tools-runner")
    with server.client(auditor) as client:
        verified = client.get("/v1/audit/verify")
        everything = client.get("/v1/audit", params={"limit": 10000})
    assert verified.status_code == 200 and verified.json()["ok"] is True, verified.text
    assert verified.json()["first_bad_seq"] is None
    assert everything.status_code == 200
    [secret_set] = [r for r in everything.json() if r["action"] == "secret.set"]
    assert secret_set["object"] == "weather_key"

    # ... and the key is nowhere but at the API
    with server.client(user) as client:
        history = client.get(f"/v1/sessions/{day.session}/messages")
    assert history.status_code == 200
    replayed = raw_stream(server, user, day.session, up_to=day.events[-1]["_id"])
    assert f"id: {day.events[-1]['_id']}" in replayed
    for where, text in (("the events", json.dumps(day.events)),
                        ("the replayed event stream", replayed),
                        ("the stored conversation", history.text),
                        ("the audit", everything.text),
                        ("the server log", server.log()),
                        ("the tool's source", TOOL.read_text())):
        assert KEY not in text, f"the key is in {where}"
