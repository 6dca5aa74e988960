"""``navi bench kernels``: a kernel execute's latency through the API, and what kernels cost.

Starts a real ``navi serve`` on 127.0.0.1 with its own data dir (``NAVI_KERNEL_IDLE_S`` short,
so the idle save can be watched), makes a tenant, a user token and a session, then:

- ``execute``: ``POST /v1/sessions/{id}/kernels/default/execute {"code": "x + 1"}`` on one
  keep-alive connection (``exec_api.LeanClient``), after a first execute that starts the
  kernel (``x = 1``; its own time is reported as ``first_execute_ms``): each later one skips
  the container start a per-call exec pays;
- ``running_kernel``: the kernel container's memory (its cgroup's ``memory.current`` as the
  engine reports it, ``docker stats``-style ``usage - inactive_file``) while it runs;
- ``saved_kernel``: after ``NAVI_KERNEL_IDLE_S`` without use, the number of the session's
  containers (0: saved and stopped, no RAM) and the bytes of its saved state on disk, then
  the time of the next execute (restore included) and whether ``x`` came back.

Results go to ``bench/results/kernels-<UTC time>.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from typing import Annotated, Any

import docker
import httpx
import typer

from bench import served as served_api
from bench.exec_api import LeanClient
from runtime.config import PROJECT_ROOT

RESULTS = PROJECT_ROOT / "bench" / "results"


def _summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    q = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else ms * 99
    return {"runs": len(ms), "p50_ms": round(statistics.median(ms), 2),
            "p95_ms": round(q[94], 2), "min_ms": round(ms[0], 2), "max_ms": round(ms[-1], 2)}


def _memory(api: docker.APIClient, session: str) -> dict[str, Any]:
    found = api.containers(filters={"label": f"navi.session={session}"})
    out: dict[str, Any] = {"containers": len(found), "memory_bytes": 0}
    for container in found:
        try:
            stats = api.stats(container["Id"], stream=False)
        except Exception:  # removed meanwhile (a kernel being stopped)
            out["containers"] -= 1
            continue
        mem = stats.get("memory_stats", {})
        inactive = (mem.get("stats") or {}).get("inactive_file", 0)
        out["memory_bytes"] += max(0, int(mem.get("usage", 0)) - int(inactive))
    out["memory_mib"] = round(out["memory_bytes"] / 2**20, 1)
    return out


async def run(runs: int, idle_s: float) -> dict[str, Any]:
    served = served_api.start("kernels", env={
        "NAVI_KERNEL_IDLE_S": str(idle_s),
        "NAVI_CHANGE_BURST": "1000000", "NAVI_CHANGE_RATE": "1000000"},  # executes are changes
        policy=(PROJECT_ROOT / "policies" / "default.yaml").read_text().replace(
            "execs_per_minute: 60", "execs_per_minute: 100000"))
    port, tmp = served.port, served.tmp
    api = docker.APIClient(version="auto", timeout=60)
    report: dict[str, Any] = {"load_before": os.getloadavg()}
    try:
        async with httpx.AsyncClient(base_url=served.url, timeout=120) as client:
            await served_api.until_up(client, served)
            auth, session = await served_api.user_session(client, served)
            user_token = auth["Authorization"].removeprefix("Bearer ")
            path = f"/v1/sessions/{session}/kernels/default/execute"
            lean = await LeanClient.connect(port)
            try:
                began = time.perf_counter()
                status, body = await lean.post(path, {"code": "x = 1"}, user_token)
                report["first_execute_ms"] = round((time.perf_counter() - began) * 1000, 1)
                if status != 200:
                    raise RuntimeError(f"first execute failed: {status} {body[:300]!r}")
                latencies = []
                for _ in range(runs):
                    began = time.perf_counter()
                    status, body = await lean.post(path, {"code": "x + 1"}, user_token)
                    latencies.append(time.perf_counter() - began)
                    if status != 200 or json.loads(body)["results"] != [{"text/plain": "2"}]:
                        raise RuntimeError(f"execute failed: {status} {body[:300]!r}")
                report["execute"] = _summary(latencies)
                report["running_kernel"] = _memory(api, session)
                deadline = time.monotonic() + idle_s + 90
                while time.monotonic() < deadline:
                    await asyncio.sleep(1)
                    listed = (await client.get(f"/v1/sessions/{session}/kernels",
                                               headers=auth)).json()
                    if listed and listed[0]["state"] == "saved":
                        break
                saved = _memory(api, session)
                until = time.monotonic() + 30  # the record says saved; the container goes next
                while saved["containers"] and time.monotonic() < until:
                    await asyncio.sleep(0.5)
                    saved = _memory(api, session)
                state = list((tmp / "data" / "workspaces").glob(f"*/{session}/kernels/default/"
                                                                  "state.pkl"))
                saved["state_bytes"] = state[0].stat().st_size if state else None
                report["saved_kernel"] = saved
                await lean.close()  # idle past the server's keep-alive: a new connection
                lean = await LeanClient.connect(port)
                began = time.perf_counter()
                status, body = await lean.post(path, {"code": "x + 1"}, user_token)
                answer = json.loads(body)
                report["restore_execute_ms"] = round((time.perf_counter() - began) * 1000, 1)
                report["restored"] = answer.get("restored")
            finally:
                await lean.close()
    finally:
        served.stop()
        api.close()
    report["load_after"] = os.getloadavg()
    return report


def cli(runs: Annotated[int, typer.Option(help="timed executes")] = 200,
        idle_s: Annotated[float, typer.Option(help="NAVI_KERNEL_IDLE_S of the server")] = 5.0,
        ) -> None:
    """Kernel execute p50/p95 through the API; memory of a running and of a saved kernel."""
    report = asyncio.run(run(runs, idle_s))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"kernels-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    typer.echo(json.dumps(report, indent=2))
    typer.echo(f"written to {out}")
