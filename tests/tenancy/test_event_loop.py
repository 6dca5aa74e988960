"""A safe event loop: nothing a tenant sends makes the supervisor stop answering everyone.

A real `navi serve` on loopback. An agent-written tool's JSON Schema can make validation
exponential (`$defs` chain referencing each level twice), infinite (`{"$ref": "#"}`) or
backtrack (regex keywords); an allowed schema can meet huge arguments. Each request answers
a tool error or a clean 4xx, and `GET /v1/healthz`, polled from another thread the whole
time, answers within 1 s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.tenancy.health_probe import HealthProbe
from tests.unit.test_schema_guard import chain

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("tenancy-loop"))
    yield srv
    stop_server(srv)


def tool_code(name: str, parameters: dict[str, Any]) -> str:
    return (f"name = {name!r}\ndescription = 'hostile schema'\n"
            f"parameters = {json.dumps(parameters)}\n\n"
            "async def execute(params):\n    return 'ran'\n")


def exec_(client: httpx.Client, session: str, tool: str, args: dict[str, Any]
          ) -> httpx.Response:
    return client.post(f"/v1/sessions/{session}/exec", json={"tool": tool, "args": args})


def tool_error(resp: httpx.Response) -> str:
    """A request that answered a tool error (200, ok false); its message."""
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["ok"] is False, body
    return str(body["error"])


def clean_4xx(resp: httpx.Response) -> dict[str, Any]:
    assert 400 <= resp.status_code < 500, (resp.status_code, resp.text)
    return dict(resp.json()["error"])


HOSTILE: dict[str, tuple[dict[str, Any], str]] = {
    **{f"chain{d}": (chain(d), "once its '$ref's are followed") for d in (16, 20, 24)},
    "ref_root": ({"type": "object", "$ref": "#"}, "recursive schemas are not allowed"),
    "ref_allof": ({"type": "object", "allOf": [{"$ref": "#"}]}, "recursive schemas"),
    "ref_prop": ({"type": "object", "properties": {"x": {"$ref": "#"}}}, "recursive schemas"),
    "redos": ({"type": "object", "properties": {"x": {"type": "string",
                                                     "pattern": "^(a+)+$"}}}, "'pattern'"),
}


def test_hostile_schemas_are_refused_and_the_loop_stays_free(server: Server) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as client, HealthProbe(server.url) as probe:
        session = client.post("/v1/sessions", json={}).json()["id"]
        for name, (schema, reason) in HOSTILE.items():
            started = time.monotonic()
            error = tool_error(exec_(client, session, "write_tool",
                                     {"name": name, "code": tool_code(name, schema)}))
            assert "tool not written: parameters: " in error and reason in error, error
            args = {"x": "a" * 40 + "!"} if name == "redos" else {"x": "s"}
            # nothing was stored: test_tool and the tool's own name find no tool
            assert clean_4xx(exec_(client, session, "test_tool",
                                   {"name": name, "params": args}))["code"] == "not_found"
            assert clean_4xx(exec_(client, session, name, args))["code"] == "not_found"
            assert time.monotonic() - started < 5
        reload = exec_(client, session, "reload_tools", {}).json()
        assert reload["ok"] is True, reload
    assert not probe.failures, probe.failures
    print(f"healthz during hostile writes: max {probe.max_s * 1000:.0f} ms "
          f"over {len(probe.latencies)} polls")
    assert probe.max_s < 1.0


# Allowed: 1900 subschemas, but each applies to every item (50k items: ~1 min unbounded).
HEAVY = {"type": "object", "properties": {
    "x": {"type": "array", "items": {"allOf": [{"minimum": 0}] * 1900}}}}


def heavy_tool(client: httpx.Client) -> str:
    """A session whose tenant has the loaded tool `heavy` (schema HEAVY)."""
    session = str(client.post("/v1/sessions", json={}).json()["id"])
    written = exec_(client, session, "write_tool",
                    {"name": "heavy", "code": tool_code("heavy", HEAVY)}).json()
    assert written["ok"] is True, written
    assert exec_(client, session, "reload_tools", {}).json()["ok"] is True
    return session


def test_huge_arguments_for_an_allowed_schema_are_time_boxed(server: Server) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as client:
        session = heavy_tool(client)
        args = {"x": [0] * 50_000}
        calls = [("heavy", args), ("test_tool", {"name": "heavy", "params": args})] * 2
        with HealthProbe(server.url) as probe, ThreadPoolExecutor(4) as pool:
            started = time.monotonic()
            answers = list(pool.map(lambda c: exec_(client, session, *c), calls))
            elapsed = time.monotonic() - started
        for resp in answers:
            error = clean_4xx(resp)
            assert error["code"] == "validation_budget", error
            assert "could not be checked within 1 s" in error["message"], error
        # arguments too deep or too many are refused before any walk
        deep: Any = 0
        for _ in range(100):
            deep = [deep]
        assert clean_4xx(exec_(client, session, "heavy", {"x": deep}))["code"] == \
            "validation_budget"
    assert not probe.failures, probe.failures
    print(f"healthz during 4 concurrent over-budget validations ({elapsed:.1f} s): "
          f"max {probe.max_s * 1000:.0f} ms over {len(probe.latencies)} polls")
    assert probe.max_s < 1.0
    assert elapsed < 15


def test_a_validation_flood_does_not_hold_up_a_neighbour(server: Server) -> None:
    """One tenant's over-budget validations wait in its own line (a few at a time), so the
    worker threads every request needs stay free for another tenant's calls."""
    _, flooder = server.tenant_with_user()
    _, neighbour = server.tenant_with_user()
    with server.client(flooder) as a, server.client(neighbour) as b:
        session_a = heavy_tool(a)
        session_b = str(b.post("/v1/sessions", json={}).json()["id"])
        args = {"x": [0] * 50_000}
        with ThreadPoolExecutor(16) as pool:
            flood = [pool.submit(exec_, a, session_a, "heavy", args) for _ in range(16)]
            time.sleep(0.5)
            latencies = []
            while not all(f.done() for f in flood):
                started = time.monotonic()
                resp = exec_(b, session_b, "todo", {"action": "list"})
                latencies.append(time.monotonic() - started)
                assert resp.status_code == 200, resp.text
            for f in flood:
                assert clean_4xx(f.result())["code"] == "validation_budget"
    slowest = sorted(latencies)[-3:]
    print(f"neighbour's todo during a 16-call validation flood: slowest "
          f"{[round(t * 1000) for t in slowest]} ms of {len(latencies)} calls")
    assert max(latencies) < 1.0  # without the tenant's line: 16 s of work on 6 threads
