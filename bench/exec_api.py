"""Warm calls through the HTTP API (part of ``navi bench exec``).

Starts a real ``navi serve`` on 127.0.0.1 with its own data dir (warm pool of 1 per session),
makes a tenant, a user token and a session, then times ``POST /v1/sessions/{id}/exec``
(``code_exec``, python ``print(1)``), 0.5 s apart (think time: the next warm container is
launched in between), alternating two clients on one keep-alive connection each:

- ``warm_api``: a minimal HTTP/1.1 client (one write, read the head and ``Content-Length``
  bytes): what the server costs, with as little client as a socket allows;
- ``warm_api_httpx``: ``httpx.AsyncClient``, what a Python caller typically sees (httpx's
  own work is ≈ 2-5 ms a request on the dev machine, more than the server's routing);
- ``warm_beside_api`` (when the caller passes ``bare``): the bare warm backend call, timed in
  the same rounds, so the API's overhead compares calls made under the same load.

Then time to first command as a new user sees it (``ttfc_api``): ``POST /v1/sessions`` and
that session's first ``code_exec``, from the minimal client, THINK_S apart (the tenant's pool
refills in between); with ``beside_ttfc`` (a timed hardened ``docker run``) one of those in
each round (``docker_run_beside_ttfc``), so the two compare under the same load.

The server's JSON log says which calls ran warm.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from runtime.config import PROJECT_ROOT

THINK_S = 0.5


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LeanClient:
    """Just enough HTTP/1.1 for timing: one keep-alive connection, JSON bodies with a
    ``Content-Length`` (what the API answers), no redirects, no chunked bodies."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int) -> LeanClient:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def post(self, path: str, body: object, token: str) -> tuple[int, bytes]:
        data = json.dumps(body).encode()
        self.writer.write(
            f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n".encode()
            + data)
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        fields = dict(line.split(":", 1) for line in head[1:] if ":" in line)
        length = {k.strip().lower(): v.strip() for k, v in fields.items()}.get("content-length")
        if length is None:
            raise RuntimeError(f"no content-length in the answer: {head}")
        return int(head[0].split()[1]), await self.reader.readexactly(int(length))

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


def _check(status: int, body: bytes) -> None:
    if status != 200 or json.loads(body).get("stdout") != "1\n":
        raise RuntimeError(f"API exec failed: {status} {body[:300]!r}")


async def api_latencies(
    runs: int, bare: Callable[[], Awaitable[float]] | None = None,
    beside_ttfc: Callable[[], Awaitable[float]] | None = None,
) -> tuple[dict[str, list[float]], str]:
    """Per-call latencies (s) of each client (and of ``bare``, a timed bare warm call, in
    the same rounds), and "<warm>/<timed>" from the server's log."""
    tmp = Path(tempfile.mkdtemp(prefix="navi-bench-api-"))
    port, token = _free_port(), "navi_admin_" + secrets.token_urlsafe(24)
    env = {**os.environ, "NAVI_ADMIN_TOKEN": token, "NAVI_DATA_DIR": str(tmp / "data"),
           "NAVI_LOG_FORMAT": "json", "NAVI_WARM_POOL_SIZE": "1"}  # fmt: skip
    log_path = tmp / "server.log"
    policy = tmp / "policy.yaml"  # default.yaml with room for both clients' calls in a minute
    policy.write_text((PROJECT_ROOT / "policies" / "default.yaml").read_text().replace(
        "execs_per_minute: 60", "execs_per_minute: 100000"))
    with log_path.open("wb") as log_file:
        server = subprocess.Popen(
            [sys.executable, "-m", "runtime.cli", "serve", "--host", "127.0.0.1",
             "--port", str(port), "--policy", str(policy)],
            cwd=PROJECT_ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    latencies: dict[str, list[float]] = {"warm_api": [], "warm_api_httpx": []}
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            await _until_up(client, server, log_path)
            admin = {"Authorization": f"Bearer {token}"}
            tenant = (await client.post("/v1/tenants", json={"name": "bench"}, headers=admin))
            tenant_id = tenant.json()["id"]
            user = await client.post(f"/v1/tenants/{tenant_id}/tokens", json={"role": "user"},
                                     headers=admin)  # fmt: skip
            user_token = user.json()["token"]
            auth = {"Authorization": f"Bearer {user_token}"}
            session = (await client.post("/v1/sessions", json={}, headers=auth)).json()["id"]
            path = f"/v1/sessions/{session}/exec"
            body = {"tool": "code_exec", "args": {"language": "python", "code": "print(1)"}}
            lean = await LeanClient.connect(port)
            try:
                _check(*await lean.post(path, body, user_token))  # a session's first is cold
                for _ in range(runs):
                    if bare is not None:
                        await asyncio.sleep(THINK_S)
                        latencies.setdefault("warm_beside_api", []).append(await bare())
                    await asyncio.sleep(THINK_S)
                    started = time.perf_counter()
                    status, answer = await lean.post(path, body, user_token)
                    latencies["warm_api"].append(time.perf_counter() - started)
                    _check(status, answer)
                    await asyncio.sleep(THINK_S)
                    started = time.perf_counter()
                    resp = await client.post(path, json=body, headers=auth)
                    latencies["warm_api_httpx"].append(time.perf_counter() - started)
                    _check(resp.status_code, resp.content)
                await _ttfc(lean, user_token, body, runs, latencies, beside_ttfc)
            finally:
                await lean.close()
    finally:
        stop_server(server)
        warm = _warm_calls(log_path)
        shutil.rmtree(tmp, ignore_errors=True)
    return latencies, f"{max(0, warm)}/{3 * runs} (server log: exec_finished warm=true)"


async def _ttfc(lean: LeanClient, token: str, body: object, runs: int,
                latencies: dict[str, list[float]],
                beside: Callable[[], Awaitable[float]] | None) -> None:
    """New sessions, each timed from its create to its first result."""
    for _ in range(runs):
        if beside is not None:
            await asyncio.sleep(THINK_S)
            latencies.setdefault("docker_run_beside_ttfc", []).append(await beside())
        await asyncio.sleep(THINK_S)
        started = time.perf_counter()
        status, answer = await lean.post("/v1/sessions", {}, token)
        if status not in (200, 201):
            raise RuntimeError(f"session create failed: {status} {answer[:300]!r}")
        created = time.perf_counter()
        session = json.loads(answer)["id"]
        _check(*await lean.post(f"/v1/sessions/{session}/exec", body, token))
        latencies.setdefault("ttfc_api", []).append(time.perf_counter() - started)
        latencies.setdefault("ttfc_api_create", []).append(created - started)


def stop_server(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM, and SIGKILL if it has not exited within 30 s."""
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


async def _until_up(client: httpx.AsyncClient, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120  # a loaded machine: imports alone can take 30 s
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
