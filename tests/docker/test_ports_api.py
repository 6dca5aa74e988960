"""A session's ports behind a real `navi serve`: a background process declaring a port is
reached through /v1/sessions/{id}/ports/{port}/... (HTTP, SSE, WebSocket; Navi's credentials
stripped), from the session's later calls and kernels at 127.0.0.1:<port> (not from another
session's), and through preview links on origins of their own, which end with their process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from tests.docker.test_processes_api import POLICY, session_of, start, wait_for
from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.docker
APP = (Path(__file__).resolve().parents[1] / "fakes" / "port_app.py").read_text()
PORT = 8177
CREDENTIALS = {"Cookie": "navi=1", "X-API-KEY": "k1", "X-Access-Token": "k2",
               "E2B-Traffic-Access-Token": "k3"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("ports"), policy=POLICY, ready_s=120)
    yield srv
    stop_server(srv)


def serve(client: httpx.Client, session: str, port: int = PORT) -> dict[str, Any]:
    """A process of the session running tests/fakes/port_app.py on ``port``."""
    up = client.put(f"/v1/sessions/{session}/files/port_app.py", content=APP.encode())
    assert up.status_code == 201, up.text
    proc = start(client, session, f"exec python3 port_app.py {port}", ports=[port])
    wait_for(lambda: client.get(f"/v1/sessions/{session}/ports/{port}/x").status_code == 200,
             60, "the port to answer")
    return proc


def call(client: httpx.Client, session: str, url: str) -> str:
    code = ("import urllib.request\ntry:\n"
            f"    print(urllib.request.urlopen({url!r}, timeout=10).read().decode())\n"
            "except Exception as exc:\n    print('failed:', type(exc).__name__)")
    resp = client.post(f"/v1/sessions/{session}/exec", json={
        "tool": "code_exec", "args": {"language": "python", "code": code}})
    assert resp.status_code == 200, resp.text
    return str(resp.json()["stdout"]).strip()


def origin_get(server: Server, url: str, path: str, **kw: Any) -> httpx.Response:
    """A request to a preview link's origin (``*.localhost`` resolved to loopback, as a
    browser does)."""
    parsed = httpx.URL(url)
    headers = {"Host": parsed.netloc.decode(), **kw.pop("headers", {})}
    return httpx.get(f"http://127.0.0.1:{parsed.port}{path}", headers=headers, timeout=30, **kw)


def test_the_port_through_the_api(server: Server) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as client:
        session = session_of(client)
        serve(client, session)
        base = f"/v1/sessions/{session}/ports/{PORT}"
        echoed = client.get(f"{base}/headers", headers=CREDENTIALS)
        assert echoed.status_code == 200
        assert echoed.headers["x-content-type-options"] == "nosniff"
        seen = {k.lower() for k in echoed.json()}
        assert not seen & {"authorization", *(k.lower() for k in CREDENTIALS)}, echoed.json()
        # SSE streams through, event by event
        times = []
        with client.stream("GET", f"{base}/sse") as events:
            for line in events.iter_lines():
                if line.startswith("data:"):
                    times.append(time.monotonic())
        assert len(times) == 3 and times[2] - times[0] > 0.25
        # a POST body and its answer
        assert client.post(f"{base}/echo", content=b"z" * 200000).content == b"z" * 200000
        # WebSocket, with the bearer token (stripped before the program)
        ws_url = server.url.replace("http://", "ws://") + f"{base}/ws"
        with connect(ws_url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            ws.send("hi")
            assert ws.recv(timeout=10) == "echo: hi"
        # not declared: 404; without a token: 401
        assert client.get(f"/v1/sessions/{session}/ports/{PORT + 1}/x").status_code == 404
        assert httpx.get(server.url + f"{base}/x").status_code == 401


def test_a_declared_port_nobody_listens_on_is_502(server: Server) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as client:
        session = session_of(client)
        start(client, session, "sleep 120", ports=[PORT])
        resp = wait_for(lambda: (r := client.get(f"/v1/sessions/{session}/ports/{PORT}/x"))
                        .status_code == 502 and r, 60, "a 502")
        assert resp.json()["error"]["code"] == "port_unreachable"


def test_later_calls_reach_the_port_other_sessions_do_not(server: Server) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as client:
        mine, other = session_of(client), session_of(client)
        serve(client, mine)
        assert call(client, mine, f"http://127.0.0.1:{PORT}/from-call") == "hello /from-call"
        assert call(client, other, f"http://127.0.0.1:{PORT}/x").startswith("failed:")
        assert client.get(f"/v1/sessions/{other}/ports/{PORT}/x").status_code == 404
        # the session goes: its process, its port and its relay's directories with it
        assert (server.data_dir / "ports" / "s" / mine).is_dir()
        assert client.delete(f"/v1/sessions/{mine}").status_code == 204
        assert not (server.data_dir / "ports" / "s" / mine).exists()
        assert not (server.data_dir / "ports" / "p" / mine).exists()


def kernel_get(client: httpx.Client, session: str, url: str, kernel: str) -> str:
    code = ("import urllib.request\ntry:\n"
            f"    print(urllib.request.urlopen({url!r}, timeout=10).read().decode())\n"
            "except Exception as exc:\n    print('failed:', type(exc).__name__)")
    resp = client.post(f"/v1/sessions/{session}/kernels/{kernel}/execute",
                       json={"code": code}, timeout=120)
    assert resp.status_code == 200, resp.text
    return str(resp.json()["stdout"]).strip()


def poll(check: Any, what: str) -> Any:
    """``check`` every 0.5 s for 10 s (each is a kernel execute: within execs_per_minute)."""
    for _ in range(20):
        if got := check():
            return got
        time.sleep(0.5)
    raise AssertionError(f"not within 10 s: {what}")


def test_kernels_reach_the_sessions_ports(server: Server) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as client:
        session = session_of(client)
        url = f"http://127.0.0.1:{PORT}/from-kernel"
        # a kernel started before the process: its relay follows the ports as they come
        assert kernel_get(client, session, url, "early").startswith("failed:")
        proc = serve(client, session)
        assert poll(lambda: kernel_get(client, session, url, "early") == "hello /from-kernel",
                    "the running kernel to reach the port")
        # a kernel started after it: listening from its start
        assert kernel_get(client, session, url, "late") == "hello /from-kernel"
        assert client.delete(f"/v1/sessions/{session}/processes/{proc['id']}").status_code == 204
        assert poll(lambda: kernel_get(client, session, url, "late").startswith("failed:"),
                    "the port to go with its process")


def test_preview_links(server: Server) -> None:
    tenant, token = server.tenant_with_user()
    with server.client(token) as client:
        session = session_of(client)
        proc = serve(client, session)
        made = client.post(f"/v1/sessions/{session}/previews", json={"port": PORT})
        assert made.status_code == 201, made.text
        link = made.json()
        assert set(link) == {"id", "url", "port", "expires_at"} and link["port"] == PORT
        assert ".localhost:" in link["url"] and str(server.url) not in link["url"]
        assert 3500 < link["expires_at"] - time.time() <= 3600
        # no bearer needed; credentials still stripped; service workers refused
        page = origin_get(server, link["url"], "/headers", headers=CREDENTIALS)
        assert page.status_code == 200 and "cookie" not in {k.lower() for k in page.json()}
        assert origin_get(server, link["url"], "/sw.js",
                          headers={"Service-Worker": "script"}).status_code == 403
        listed = client.get(f"/v1/sessions/{session}/previews").json()
        assert [x["id"] for x in listed] == [link["id"]]
        too_long = client.post(f"/v1/sessions/{session}/previews",
                               json={"port": PORT, "expires_in_s": 86401})
        assert too_long.status_code in (400, 422)
        assert client.post(f"/v1/sessions/{session}/previews",
                           json={"port": PORT + 1}).status_code == 404
        # revoked: gone
        assert client.delete(f"/v1/sessions/{session}/previews/{link['id']}").status_code == 204
        assert origin_get(server, link["url"], "/x").status_code == 404
        assert client.delete(f"/v1/sessions/{session}/previews/{link['id']}").status_code == 404
        # its process ends: gone
        second = client.post(f"/v1/sessions/{session}/previews", json={"port": PORT}).json()
        assert origin_get(server, second["url"], "/x").status_code == 200
        assert client.delete(f"/v1/sessions/{session}/processes/{proc['id']}").status_code == 204
        assert wait_for(lambda: origin_get(server, second["url"], "/x").status_code == 404, 30)
    with server.client(server.admin_token) as admin:
        audit = admin.get("/v1/audit", params={"session": session, "action": "port.link",
                                                "tenant": tenant})
    assert audit.status_code == 200, audit.text
    assert len(audit.json()) == 3  # two made, one revoked


def test_a_profile_without_ports_is_refused(server: Server) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as client:
        session = session_of(client, profile="noports")
        resp = client.post(f"/v1/sessions/{session}/previews", json={"port": PORT})
        assert resp.status_code == 403, resp.text
        assert resp.json()["error"]["code"] == "policy_denied"
        assert "ports" in resp.json()["error"]["rule"]
