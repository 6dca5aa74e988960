"""Stateful Python kernels behind a real `navi serve` (real engine, real session disks).

Names persist between executes of one kernel and nowhere else; results are Jupyter's (last
value, matplotlib PNG, DataFrame HTML); a timeout interrupts and keeps the names; a kernel
that dies answers `KernelDied` once; every execute is audited (intent with the code's
SHA-256, then the outcome); the kernels API lists, limits and deletes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("kernels"), ready_s=180)
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def user(server: Server) -> tuple[str, str]:
    return server.tenant_with_user()


def new_session(client: httpx.Client) -> str:
    resp = client.post("/v1/sessions", json={})
    resp.raise_for_status()
    return str(resp.json()["id"])


def execute(client: httpx.Client, session: str, code: str, kernel: str = "default",
            **body: Any) -> dict[str, Any]:
    resp = client.post(f"/v1/sessions/{session}/kernels/{kernel}/execute",
                       json={"code": code, **body}, timeout=120)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def test_names_persist_and_results_are_jupyters(server: Server, user: tuple[str, str]) -> None:
    _, token = user
    with server.client(token) as client:
        session = new_session(client)
        first = execute(client, session, "x = 41\nprint('set')")
        assert first["ok"] and first["stdout"] == "set\n" and first["results"] == []
        assert first["error"] is None and first["kernel"] == "default"
        assert isinstance(first["audit_seq"], int) and first["exec_id"].startswith("ex_")
        second = execute(client, session, "def inc(v):\n    return v + 1\ninc(x)")
        assert second["results"] == [{"text/plain": "42"}], second
        assert second["execution_count"] == first["execution_count"] + 1
        plot = execute(client, session, "import matplotlib.pyplot as plt\n"
                                        "plt.plot([1, 2, 3]); plt.title('t')")
        pngs = [r["image/png"] for r in plot["results"] if "image/png" in r]
        assert len(pngs) == 1, plot
        assert base64.b64decode(pngs[0]).startswith(b"\x89PNG\r\n\x1a\n")
        frame = execute(client, session, "import pandas as pd\n"
                                         "pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
        (table,) = frame["results"]
        assert "<table" in table["text/html"] and "a" in table["text/plain"]
        failed = execute(client, session, "1 / 0")
        assert not failed["ok"] and failed["error"]["name"] == "ZeroDivisionError"
        assert any("1 / 0" in line for line in failed["error"]["traceback"])
        again = execute(client, session, "inc(x)")  # an error keeps the names
        assert again["results"] == [{"text/plain": "42"}]
        listed = client.get(f"/v1/sessions/{session}/kernels").json()
        assert [(k["name"], k["state"]) for k in listed] == [("default", "running")]
        assert listed[0]["started_at"] <= listed[0]["last_used_at"]


def test_nothing_is_shared_between_sessions_or_kernels(server: Server,
                                                       user: tuple[str, str]) -> None:
    _, token = user
    _, other_token = server.tenant_with_user()
    with server.client(token) as client, server.client(other_token) as other:
        mine = new_session(client)
        execute(client, mine, "secret = 'mine'")
        second = new_session(client)
        assert execute(client, second, "secret")["error"]["name"] == "NameError"
        assert execute(client, mine, "secret", kernel="side")["error"]["name"] == "NameError"
        theirs = new_session(other)
        assert execute(other, theirs, "secret")["error"]["name"] == "NameError"
        # another tenant's session is not found, kernels included
        resp = other.post(f"/v1/sessions/{mine}/kernels/default/execute",
                          json={"code": "secret"})
        assert resp.status_code == 404
        assert other.get(f"/v1/sessions/{mine}/kernels").status_code == 404


def test_the_kernel_sees_the_session_files(server: Server, user: tuple[str, str]) -> None:
    _, token = user
    with server.client(token) as client:
        session = new_session(client)
        put = client.put(f"/v1/sessions/{session}/files/data.csv", content=b"a,b\n1,2\n3,4\n")
        assert put.status_code in (200, 201), put.text
        out = execute(client, session, "import os, pandas as pd\n"
                                       "print(os.getcwd())\nint(pd.read_csv('data.csv').b.sum())")
        assert out["stdout"] == "/workspace\n" and out["results"] == [{"text/plain": "6"}]


def test_timeout_interrupts_and_keeps_the_names(server: Server, user: tuple[str, str]) -> None:
    _, token = user
    with server.client(token) as client:
        session = new_session(client)
        execute(client, session, "kept = 7")
        began = time.monotonic()
        slow = execute(client, session, "import time\ntime.sleep(60)", timeout_s=2)
        assert time.monotonic() - began < 20
        assert slow["timed_out"] is True and not slow["ok"]
        assert slow["error"]["name"] == "KeyboardInterrupt"
        assert execute(client, session, "kept")["results"] == [{"text/plain": "7"}]


def test_a_kernel_busy_after_the_interrupt_is_killed(server: Server, user: tuple[str, str],
                                                     docker_api: docker.APIClient) -> None:
    _, token = user
    with server.client(token) as client:
        session = new_session(client)
        execute(client, session, "kept = 7")
        stubborn = ("import time\nwhile True:\n    try:\n        time.sleep(0.1)\n"
                    "    except KeyboardInterrupt:\n        pass")
        dead = execute(client, session, stubborn, timeout_s=1)
        assert dead["timed_out"] is True
        assert dead["error"]["name"] == "KernelDied", dead
        fresh = execute(client, session, "kept")  # it starts empty
        assert fresh["error"]["name"] == "NameError"


def test_a_kernel_that_dies_answers_kernel_died_once(server: Server,
                                                     user: tuple[str, str]) -> None:
    _, token = user
    with server.client(token) as client:
        session = new_session(client)
        execute(client, session, "kept = 7")
        dead = execute(client, session, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
        assert dead["error"]["name"] == "KernelDied" and not dead["ok"], dead
        after = execute(client, session, "kept")
        assert after["error"]["name"] == "NameError"  # empty, not KernelDied again
        assert execute(client, session, "1 + 1")["results"] == [{"text/plain": "2"}]


def test_out_of_memory_is_kernel_died(server: Server, user: tuple[str, str]) -> None:
    _, token = user
    with server.client(token) as client:
        session = new_session(client)
        hog = execute(client, session, "blocks = []\nwhile True:\n"
                                       "    blocks.append(bytearray(64 * 1024 * 1024))")
        assert hog["error"]["name"] == "KernelDied", hog


def test_every_execute_is_audited(server: Server, user: tuple[str, str]) -> None:
    tenant, token = user
    code = "audited = 'yes'"
    with server.client(token) as client:
        session = new_session(client)
        out = execute(client, session, code)
    with server.client(server.token_for(tenant, "tenant_admin")) as admin:
        records = admin.get("/v1/audit", params={"session": session, "limit": 100}).json()
    rows = records["records"] if isinstance(records, dict) else records
    mine = [r for r in rows if r.get("exec_id") == out["exec_id"]]
    kinds = [r["kind"] for r in mine]
    assert "intent" in kinds and "outcome" in kinds, mine
    intent = next(r for r in mine if r["kind"] == "intent")
    assert intent["tool"] == "kernel_exec"
    assert intent["stdin_sha256"] == hashlib.sha256(code.encode()).hexdigest()
    assert next(r for r in mine if r["kind"] == "outcome")["seq"] == out["audit_seq"]


def test_kernels_api_limits_and_deletes(server: Server, user: tuple[str, str],
                                        docker_api: docker.APIClient) -> None:
    _, token = user
    with server.client(token) as client:
        session = new_session(client)
        bad = client.post(f"/v1/sessions/{session}/kernels/Bad!/execute", json={"code": "1"})
        assert bad.status_code in (400, 404, 422)
        execute(client, session, "a = 1", kernel="one")
        execute(client, session, "b = 1", kernel="two")
        third = client.post(f"/v1/sessions/{session}/kernels/three/execute",
                            json={"code": "1"})
        assert third.status_code == 429, third.text
        assert third.json()["error"]["code"] == "quota_exceeded"
        assert "max_kernels_per_session" in third.text
        assert client.delete(f"/v1/sessions/{session}/kernels/one").status_code == 204
        assert client.delete(f"/v1/sessions/{session}/kernels/one").status_code == 404
        names = [k["name"] for k in client.get(f"/v1/sessions/{session}/kernels").json()]
        assert names == ["two"]
        execute(client, session, "c = 1", kernel="three")  # room again
        assert client.delete(f"/v1/sessions/{session}").status_code == 204
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and docker_api.containers(
            all=True, filters={"label": f"navi.session={session}"}):
        time.sleep(0.2)
    assert docker_api.containers(all=True, filters={"label": f"navi.session={session}"}) == []


def test_streamed_execute_carries_live_output_and_results(server: Server,
                                                          user: tuple[str, str]) -> None:
    _, token = user
    with server.client(token) as client:
        session = new_session(client)
        frames = []
        with client.stream("POST", f"/v1/sessions/{session}/kernels/default/execute",
                           params={"stream": "true"},
                           json={"code": "print('hi')\n6 * 7"}) as resp:
            assert resp.status_code == 200
            for line in resp.iter_lines():
                if line.startswith("data:"):
                    frames.append(json.loads(line[5:]))
        types = [f["type"] for f in frames]
        assert types[0] == "tool_call" and types[-1] == "tool_result", types
        assert any(f["type"] == "exec_output" and "hi" in f.get("data", "") for f in frames)
        assert frames[-1]["kernel"]["results"] == [{"text/plain": "42"}]


def test_kernel_exec_tool_through_exec(server: Server, user: tuple[str, str]) -> None:
    _, token = user
    with server.client(token) as client:
        session = new_session(client)
        body = {"tool": "kernel_exec", "args": {"code": "y = 2"}}
        assert client.post(f"/v1/sessions/{session}/exec", json=body).json()["ok"]
        body = {"tool": "kernel_exec", "args": {"code": "y * 21"}}
        out = client.post(f"/v1/sessions/{session}/exec", json=body).json()
        assert out["ok"] and "42" in out["output"], out
        reset = {"tool": "kernel_reset", "args": {}}
        assert client.post(f"/v1/sessions/{session}/exec", json=reset).json()["ok"]
        body = {"tool": "kernel_exec", "args": {"code": "y"}}
        gone = client.post(f"/v1/sessions/{session}/exec", json=body).json()
        assert not gone["ok"] and "NameError" in (gone.get("error") or ""), gone


def test_kernel_executes_are_held_to_the_change_rate(tmp_path: Path) -> None:
    """An execute is a state change: past NAVI_CHANGE_BURST (and its slow refill) it is a
    429 `change_rate`, recorded as a refusal; red without the service's meter."""
    srv = start_server(tmp_path, ready_s=180, extra_env={"NAVI_CHANGE_BURST": "2",
                                                         "NAVI_CHANGE_RATE": "0.001"})
    try:
        tenant, token = srv.tenant_with_user()
        with srv.client(token) as client:
            session = new_session(client)
            execute(client, session, "a = 1")
            execute(client, session, "a + 1")
            third = client.post(f"/v1/sessions/{session}/kernels/default/execute",
                                json={"code": "a + 2"}, timeout=120)
            assert third.status_code == 429, third.text
            assert third.json()["error"]["code"] == "change_rate"
        with srv.client(srv.token_for(tenant, "tenant_admin")) as admin:
            rows = admin.get("/v1/audit", params={"session": session}).json()
        rows = rows["records"] if isinstance(rows, dict) else rows
        assert any(r.get("rule") == "limits.change_rate" for r in rows)
    finally:
        stop_server(srv)


def test_a_kernel_ends_with_the_token_that_started_it(server: Server, user: tuple[str, str],
                                                      docker_api: docker.APIClient) -> None:
    tenant, _ = user
    with server.client(server.admin_token) as admin:
        made = admin.post(f"/v1/tenants/{tenant}/tokens", json={"role": "user"}).json()
    with server.client(made["token"]) as client:
        session = new_session(client)
        execute(client, session, "kept = 1")
        assert len(docker_api.containers(filters={"label": f"navi.session={session}"})) == 1
    with server.client(server.admin_token) as admin:
        assert admin.delete(f"/v1/tenants/{tenant}/tokens/{made['id']}").status_code == 204
    revoked_at = time.monotonic()
    while time.monotonic() - revoked_at < 15 and docker_api.containers(
            filters={"label": f"navi.session={session}"}):
        time.sleep(0.2)
    assert docker_api.containers(filters={"label": f"navi.session={session}"}) == []
    assert time.monotonic() - revoked_at < 10
