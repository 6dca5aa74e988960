"""``navi bench ports``: what the preview proxy adds to one request.

Starts a real ``navi serve`` on 127.0.0.1 (default policy: the developer profile may declare
ports), a session and a background process declaring one port. The process runs a small
HTTP/1.1 keep-alive server and, once it is up, times ``runs`` GETs to it from inside its own
container (``127.0.0.1:<port>``, one kept-alive connection): the *direct* figure, printed on
its output. Then from the host, each over one kept-alive connection: ``runs`` GETs through a
preview link's origin (no token) and ``runs`` through ``/v1/sessions/{id}/ports/{port}/``
(bearer token). Reported: p50/p95 of each and the overheads (p50 through Navi minus p50
direct), with the machine's load. Results go to ``bench/results/ports-<UTC time>.json``.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import time
from typing import Annotated, Any

import httpx
import typer

from bench import served as served_api
from bench.kernel_bench import _summary
from runtime.config import PROJECT_ROOT

RESULTS = PROJECT_ROOT / "bench" / "results"
PORT = 8099
SERVER = r'''
import http.client, http.server, json, socket, sys, threading, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else a 40 ms delayed-ACK stall per answer
    def do_GET(self):
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")  # one write
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", PORT), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
conn = http.client.HTTPConnection("127.0.0.1", PORT)
conn.connect()
conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
times = []
for _ in range(RUNS + 20):
    began = time.perf_counter()
    conn.request("GET", "/")
    conn.getresponse().read()
    times.append(time.perf_counter() - began)
print("DIRECT " + json.dumps(times[20:]), flush=True)
srv.serve_forever()
'''


def _timed(host: str, port: int, path: str, headers: dict[str, str], runs: int) -> list[float]:
    """GETs over one kept-alive connection with the same client the in-container figure
    uses (``http.client``, Nagle off), so only the path differs, not the client."""
    conn = http.client.HTTPConnection(host, port, timeout=60)
    conn.connect()
    assert conn.sock is not None
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    try:
        for i in range(runs + 20):  # the first ones warm the connection and the pool
            began = time.perf_counter()
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{path}: {resp.status} {body[:200]!r}")
            if i >= 20:
                times.append(time.perf_counter() - began)
    finally:
        conn.close()
    return times


async def run(runs: int) -> dict[str, Any]:
    served = served_api.start("ports")
    port = served.port
    report: dict[str, Any] = {"runs": runs, "load_before": os.getloadavg()}
    try:
        async with httpx.AsyncClient(base_url=served.url, timeout=120) as client:
            await served_api.until_up(client, served)
            auth, session = await served_api.user_session(client, served)
            code = SERVER.replace("PORT", str(PORT)).replace("RUNS", str(runs))
            up = await client.put(f"/v1/sessions/{session}/files/srv.py", content=code.encode(),
                                  headers=auth)
            up.raise_for_status()
            proc = await client.post(f"/v1/sessions/{session}/processes", headers=auth, json={
                "command": "exec python3 srv.py", "ports": [PORT]})
            if proc.status_code != 201:
                raise RuntimeError(f"start failed: {proc.status_code} {proc.text}")
            pid = proc.json()["id"]
            direct: list[float] = []
            deadline = time.monotonic() + 120
            while not direct and time.monotonic() < deadline:
                out = await client.get(f"/v1/sessions/{session}/processes/{pid}/output",
                                       headers=auth)
                for line in out.json()["output"].splitlines():
                    if line.startswith("DIRECT "):
                        direct = json.loads(line[7:])
                await asyncio.sleep(0.2)
            link = await client.post(f"/v1/sessions/{session}/previews", json={"port": PORT},
                                     headers=auth)
            url = httpx.URL(link.json()["url"])
            preview = await asyncio.to_thread(_timed, "127.0.0.1", int(url.port or 80), "/",
                                              {"Host": url.netloc.decode()}, runs)
            api = await asyncio.to_thread(_timed, "127.0.0.1", port,
                                          f"/v1/sessions/{session}/ports/{PORT}/", auth, runs)
            report["direct_in_container"] = _summary(direct)
            report["through_preview_origin"] = _summary(preview)
            report["through_api_ports_route"] = _summary(api)
            base = report["direct_in_container"]["p50_ms"]
            report["preview_overhead_p50_ms"] = round(
                report["through_preview_origin"]["p50_ms"] - base, 2)
            report["api_overhead_p50_ms"] = round(
                report["through_api_ports_route"]["p50_ms"] - base, 2)
    finally:
        served.stop()
    report["load_after"] = os.getloadavg()
    return report


def cli(runs: Annotated[int, typer.Option(help="requests timed per path")] = 300) -> None:
    """Preview proxy overhead per request vs the same server reached inside its container."""
    report = asyncio.run(run(runs))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"ports-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    typer.echo(json.dumps(report, indent=2))
    typer.echo(f"written to {out}")
