"""`navi bench bridges`: what a bridge costs per call over the REST API.

Starts a real `navi serve` on 127.0.0.1 (own data dir, warm pool of 1), makes a tenant, a
user token and a session, and times `code_exec` python `print(1)`:

- `rest`: `POST /v1/sessions/{id}/exec` (httpx);
- `mcp`: `tools/call` over `/mcp` with the official SDK's client (one connection, its own
  session), the path an MCP client takes;
- `inspect`: the inspect_ai sandbox provider's `exec(["python3", "-c", "print(1)"])`, when
  the provider is installed (it runs the command through `terminal`).

Calls are 0.5 s apart (the next warm container is launched in between); the first call of
each is not timed. JSON in bench/results/bridges-<UTC>.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import typer

from bench.exec_api import THINK_S, _free_port, _until_up, stop_server
from bench.exec_bench import RESULTS_DIR, summarize
from runtime.config import PROJECT_ROOT

ARGS: dict[str, Any] = {"language": "python", "code": "print(1)"}
BODY: dict[str, Any] = {"tool": "code_exec", "args": ARGS}


async def _series(runs: int, call: Callable[[], Awaitable[None]]) -> list[float]:
    latencies = []
    for i in range(runs + 1):
        await asyncio.sleep(THINK_S)
        started = time.perf_counter()
        await call()
        if i:
            latencies.append(time.perf_counter() - started)
    return latencies


async def _rest(client: httpx.AsyncClient, session: str, auth: dict[str, str]) -> None:
    resp = await client.post(f"/v1/sessions/{session}/exec", json=BODY, headers=auth)
    if resp.status_code != 200 or resp.json().get("stdout") != "1\n":
        raise RuntimeError(f"REST exec failed: {resp.status_code} {resp.text[:300]}")


async def _mcp_series(url: str, token: str, runs: int) -> list[float]:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, streamable_http_client(f"{url}/mcp", http_client=http) as (r, w), \
            ClientSession(r, w) as mcp:
        await mcp.initialize()

        async def call() -> None:
            result = await mcp.call_tool("code_exec", ARGS)
            text = getattr(result.content[0], "text", None) if result.content else None
            if result.is_error or text != "1\n":
                raise RuntimeError(f"MCP call failed: {result}")
        return await _series(runs, call)


async def _inspect_series(url: str, token: str, runs: int) -> list[float] | None:
    try:
        from runtime.bridges.inspect_sandbox import NaviSandboxEnvironment
    except ImportError:
        return None
    os.environ.update(NAVI_URL=url, NAVI_TOKEN=token)
    envs = await NaviSandboxEnvironment.sample_init("bench", None, {})
    sandbox = next(iter(envs.values()))
    try:
        async def call() -> None:
            result = await sandbox.exec(["python3", "-c", "print(1)"])
            if not result.success or result.stdout != "1\n":
                raise RuntimeError(f"inspect exec failed: {result}")
        return await _series(runs, call)
    finally:
        await NaviSandboxEnvironment.sample_cleanup("bench", None, envs, interrupted=False)


async def measure(runs: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="navi-bench-bridges-"))
    port, admin_token = _free_port(), "navi_admin_" + secrets.token_urlsafe(24)
    env = {**os.environ, "NAVI_ADMIN_TOKEN": admin_token, "NAVI_DATA_DIR": str(tmp / "data"),
           "NAVI_LOG_FORMAT": "json", "NAVI_WARM_POOL_SIZE": "1",
           "NAVI_EMBEDDED_MODEL": "off"}
    log_path = tmp / "server.log"
    policy = tmp / "policy.yaml"  # default.yaml with room for every timed call in a minute
    policy.write_text((PROJECT_ROOT / "policies" / "default.yaml").read_text().replace(
        "execs_per_minute: 60", "execs_per_minute: 100000"))
    with log_path.open("wb") as log_file:
        server = subprocess.Popen(
            [sys.executable, "-m", "runtime.cli", "serve", "--host", "127.0.0.1",
             "--port", str(port), "--policy", str(policy)], cwd=PROJECT_ROOT, env=env,
            stdout=log_file, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            await _until_up(client, server, log_path)
            admin = {"Authorization": f"Bearer {admin_token}"}
            tenant = (await client.post("/v1/tenants", json={"name": "bench"},
                                        headers=admin)).json()["id"]
            token = (await client.post(f"/v1/tenants/{tenant}/tokens", json={"role": "user"},
                                       headers=admin)).json()["token"]
            auth = {"Authorization": f"Bearer {token}"}
            session = (await client.post("/v1/sessions", json={}, headers=auth)).json()["id"]
            rest = await _series(runs, lambda: _rest(client, session, auth))
        mcp = await _mcp_series(url, token, runs)
        inspect = await _inspect_series(url, token, runs)
    finally:
        stop_server(server)
        shutil.rmtree(tmp, ignore_errors=True)
    result: dict[str, Any] = {"runs": runs, "rest": summarize(rest), "mcp": summarize(mcp)}
    if inspect is not None:
        result["inspect"] = summarize(inspect)
    for name in ("mcp", "inspect"):
        if name in result:
            result[f"{name}_over_rest_p50_ms"] = round(
                result[name]["p50_ms"] - result["rest"]["p50_ms"], 1)
    return result


def cli(runs: int = typer.Option(30, "--runs", min=4, help="Timed calls per path.")) -> None:
    """Per-call cost of the MCP and inspect_ai bridges over the REST API (print(1), warm)."""
    result = {"benchmark": "bridges",
              "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              **asyncio.run(measure(runs))}
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / time.strftime("bridges-%Y%m%dT%H%M%SZ.json", time.gmtime())
    path.write_text(json.dumps(result, indent=1) + "\n")
    for name in ("rest", "mcp", "inspect"):
        if name in result:
            stats = result[name]
            typer.echo(f"{name:8} p50 {stats['p50_ms']:7.1f} ms  p95 {stats['p95_ms']:7.1f} ms")
    typer.echo(f"results: {path}")
