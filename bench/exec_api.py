"""Warm calls through the HTTP API (part of ``navi bench exec``).

Starts a real ``navi serve`` on 127.0.0.1 with its own data dir (warm pool of 1 per session),
makes a tenant, a user token and a session, then times ``POST /v1/sessions/{id}/exec``
(``code_exec``, python ``print(1)``) from an HTTP client, 0.5 s apart (think time: the next
warm container is launched in between). The server's JSON log says which calls ran warm.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from runtime.config import PROJECT_ROOT

THINK_S = 0.5


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def api_latencies(runs: int) -> tuple[list[float], str]:
    """Per-call latencies (s) and "<warm>/<timed>" from the server's log."""
    tmp = Path(tempfile.mkdtemp(prefix="navi-bench-api-"))
    port, token = _free_port(), "navi_admin_" + secrets.token_urlsafe(24)
    env = {**os.environ, "NAVI_ADMIN_TOKEN": token, "NAVI_DATA_DIR": str(tmp / "data"),
           "NAVI_LOG_FORMAT": "json", "NAVI_WARM_POOL_SIZE": "1"}  # fmt: skip
    log_path = tmp / "server.log"
    with log_path.open("wb") as log_file:
        server = subprocess.Popen(
            [sys.executable, "-m", "runtime.cli", "serve", "--host", "127.0.0.1",
             "--port", str(port)],
            cwd=PROJECT_ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    latencies: list[float] = []
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            await _until_up(client, server, log_path)
            admin = {"Authorization": f"Bearer {token}"}
            tenant = (await client.post("/v1/tenants", json={"name": "bench"}, headers=admin))
            tenant_id = tenant.json()["id"]
            user = await client.post(f"/v1/tenants/{tenant_id}/tokens", json={"role": "user"},
                                     headers=admin)  # fmt: skip
            auth = {"Authorization": f"Bearer {user.json()['token']}"}
            session = (await client.post("/v1/sessions", json={}, headers=auth)).json()["id"]
            body = {"tool": "code_exec", "args": {"language": "python", "code": "print(1)"}}
            for i in range(runs + 1):  # the first call of the session is cold: not timed
                await asyncio.sleep(THINK_S)
                started = time.perf_counter()
                resp = await client.post(f"/v1/sessions/{session}/exec", json=body, headers=auth)
                elapsed = time.perf_counter() - started
                if resp.status_code != 200 or resp.json().get("stdout") != "1\n":
                    raise RuntimeError(f"API exec failed: {resp.status_code} {resp.text[:300]}")
                if i:
                    latencies.append(elapsed)
    finally:
        stop_server(server)
        warm = _warm_calls(log_path)
        shutil.rmtree(tmp, ignore_errors=True)
    return latencies, f"{max(0, warm)}/{runs} (server log: exec_finished warm=true)"


def stop_server(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM, and SIGKILL if it has not exited within 30 s."""
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


async def _until_up(client: httpx.AsyncClient, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"navi serve exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            if (await client.get("/v1/healthz", timeout=1)).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("navi serve did not come up")


def _warm_calls(log: Path) -> int:
    count = 0
    for line in log.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == "exec_finished" and entry.get("warm") is True:
            count += 1
    return count
