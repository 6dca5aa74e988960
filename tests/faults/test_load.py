"""Load on one real `navi serve`: many SSE readers, slow clients, a graceful stop under load.

- 200 SSE clients on one session all get an exec's events; meanwhile a client that never
  reads and a slowloris (headers one byte at a time) are connected, ~8 MiB of output is
  published (1.6 GiB delivered in all), and `GET /v1/healthz` keeps answering within 1 s;
  the supervisor's RSS grows by less than 128 MiB (measured: about 60; the hub drops a
  reader whose unread bytes pass its bound).
- 50 sessions (25 tenants x 2, within the default max_concurrent) stream an exec each at
  once: every stream ends with its result.
- SIGTERM with all of that connected and a call running: the process exits within 15 s,
  every stream ends, the running call is killed and its outcome recorded (`killed:
  supervisor shutdown`, exit 137) in the audit log (which verifies) and no container of
  the instance is left.
Loopback only; every loop is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.audit import verify_store
from tests.e2e.conftest import Server, start_server, stop_server
from tests.faults.helpers import containers_of, instance_id, new_session, wait_until

pytestmark = pytest.mark.docker

READERS = 200
STREAMS = 50


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def read_events(client: httpx.AsyncClient, session: str, until: str,
                      ready: asyncio.Event | None, counter: list[int]) -> list[dict[str, Any]]:
    """SSE events of `session` until one whose type is `until` (or the stream ends)."""
    seen: list[dict[str, Any]] = []
    async with client.stream("GET", f"/v1/sessions/{session}/events") as resp:
        assert resp.status_code == 200
        counter[0] += 1
        if ready is not None and counter[0] >= READERS:
            ready.set()
        async for line in resp.aiter_lines():
            if line.startswith("data:"):
                event = json.loads(line[5:])
                seen.append(event)
                if event["type"] == until:
                    break
    return seen


def never_reads(server: Server, token: str, session: str) -> socket.socket:
    port = int(server.url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(f"GET /v1/sessions/{session}/events HTTP/1.1\r\nHost: x\r\n"
                 f"Authorization: Bearer {token}\r\n\r\n".encode())
    return sock


def slowloris(server: Server, stop: threading.Event) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for byte in b"GET /v1/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200:
            if stop.wait(0.2):
                return
            try:
                sock.send(bytes([byte]))
            except OSError:
                return


def test_readers_slow_clients_streams_and_sigterm(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    data = server.data_dir
    instance = instance_id(data)
    stop = threading.Event()
    stuck = None
    try:
        _, token = server.tenant_with_user()
        with server.client(token) as client:
            session = new_session(client)
        headers = {"Authorization": f"Bearer {token}"}
        base_rss = rss_mib(server.process.pid)
        stuck = never_reads(server, token, session)
        loris = threading.Thread(target=slowloris, args=(server, stop), daemon=True)
        loris.start()

        async def fan_out() -> tuple[list[list[dict[str, Any]]], float, float]:
            limits = httpx.Limits(max_connections=READERS + 20)
            async with httpx.AsyncClient(base_url=server.url, headers=headers, limits=limits,
                                         timeout=httpx.Timeout(120)) as ac:
                ready, counter = asyncio.Event(), [0]
                readers = [asyncio.create_task(read_events(ac, session, "tool_result", ready,
                                                           counter)) for _ in range(READERS)]
                await asyncio.wait_for(ready.wait(), 60)
                # ~8 MiB of output: more than a reader that never reads may hold unread
                code = "import sys\nfor i in range(8192): sys.stdout.write('x' * 1023 + '\\n')"
                t0 = time.monotonic()
                resp = await ac.post(f"/v1/sessions/{session}/exec", timeout=120, json={
                    "tool": "code_exec", "args": {"language": "python", "code": code}})
                assert resp.status_code == 200, resp.text
                health = []
                for _ in range(5):
                    h0 = time.monotonic()
                    assert (await ac.get("/v1/healthz", timeout=5)).status_code == 200
                    health.append(time.monotonic() - h0)
                results = await asyncio.wait_for(asyncio.gather(*readers), 90)
                return results, time.monotonic() - t0, max(health)

        results, took, worst_health = asyncio.run(fan_out())
        assert len(results) == READERS
        assert all(r and r[-1]["type"] == "tool_result" for r in results)
        assert worst_health < 1.0, worst_health
        grown = rss_mib(server.process.pid) - base_rss
        assert grown < 128, grown  # 200 readers x ~8 MiB published: far from unbounded
        print(f"{READERS} readers got the result in {took:.1f} s, RSS +{grown:.0f} MiB, "
              f"healthz worst {worst_health * 1000:.0f} ms")

        # 50 sessions streaming at once (25 tenants x 2 sessions: within max_concurrent)
        pairs = []
        for _ in range(25):
            _, tok = server.tenant_with_user()
            with server.client(tok) as client:
                pairs += [(tok, new_session(client)) for _ in range(2)]

        async def streams() -> list[str]:
            async with httpx.AsyncClient(base_url=server.url, timeout=httpx.Timeout(180),
                                         limits=httpx.Limits(max_connections=80)) as ac:
                async def one(tok: str, sess: str) -> str:
                    async with ac.stream("POST", f"/v1/sessions/{sess}/exec",
                                         params={"stream": "true"},
                                         headers={"Authorization": f"Bearer {tok}"},
                                         json={"tool": "code_exec", "args": {
                                             "language": "python",
                                             "code": "print('hello')"}}) as resp:
                        assert resp.status_code == 200
                        last: dict[str, Any] = {}
                        async for line in resp.aiter_lines():
                            if line.startswith("data:"):
                                last = json.loads(line[5:])
                        return str(last.get("type")) if last.get("type") == "tool_result" \
                            else json.dumps(last)[:300]
                return await asyncio.wait_for(asyncio.gather(*(one(t, s) for t, s in pairs)),
                                              170)

        t0 = time.monotonic()
        ends = asyncio.run(streams())
        print(f"{STREAMS} streams ended in {time.monotonic() - t0:.1f} s: {set(ends)}")
        assert len(ends) == STREAMS and len(set(ends)) == 1, ends

        # SIGTERM under load: readers connected, a call running
        async def shutdown() -> tuple[float, int]:
            async with httpx.AsyncClient(base_url=server.url, headers=headers,
                                         limits=httpx.Limits(max_connections=READERS + 20),
                                         timeout=httpx.Timeout(60)) as ac:
                ready, counter = asyncio.Event(), [0]
                readers = [asyncio.create_task(read_events(ac, session, "never", ready,
                                                           counter)) for _ in range(READERS)]
                await asyncio.wait_for(ready.wait(), 60)
                call = asyncio.create_task(ac.post(f"/v1/sessions/{session}/exec", json={
                    "tool": "code_exec", "args": {"language": "python",
                                                  "code": "import time; time.sleep(120)"}}))
                assert await asyncio.to_thread(
                    wait_until, lambda: len(containers_of(instance)) > 0, 30)
                await asyncio.sleep(1)
                t0 = time.monotonic()
                server.process.send_signal(signal.SIGTERM)
                await asyncio.to_thread(server.process.wait, 30)
                took = time.monotonic() - t0
                done = await asyncio.wait_for(
                    asyncio.gather(*readers, call, return_exceptions=True), 30)
                return took, len(done)

        took, ended = asyncio.run(shutdown())
        print(f"SIGTERM with {READERS} readers and a running call: exited in {took:.1f} s")
        assert took < 15, took
        assert ended == READERS + 1
    finally:
        stop.set()
        if stuck is not None:
            stuck.close()
        stop_server(server)
    assert wait_until(lambda: containers_of(instance) == [], 30)
    report = verify_store(data)
    assert report.ok, report
    with sqlite3.connect(data / "audit.sqlite3") as conn:
        rows = [(k, json.loads(b).get("detail")) for (k, b) in conn.execute(
            "SELECT kind, body FROM audit WHERE exec_id = (SELECT exec_id FROM audit WHERE "
            "kind = 'intent' ORDER BY seq DESC LIMIT 1) ORDER BY seq")]
    # the running call was killed by the shutdown and its outcome says so
    assert rows == [("intent", None), ("outcome", "killed: supervisor shutdown")], rows
