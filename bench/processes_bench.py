"""``navi bench processes``: a background process's start to its first line of output.

Starts a real ``navi serve`` on 127.0.0.1 with its own data dir (default policy), makes a
tenant, a user token and a session, and follows the session's event stream. Each run:
``POST /v1/sessions/{id}/processes {"command": "echo ready; sleep 600"}`` -> the time until
the ``process_output`` event carrying ``ready`` arrives on the stream (the whole path: the
policy, the ``process.start`` audit record, the session's lease, a fresh hardened container
created, attached and started, its output read, logged and published), then ``DELETE`` (the
stop, TERM, is timed too). Reported: p50/p95 of both, the machine's load before and after.
Results go to ``bench/results/processes-<UTC time>.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Annotated, Any

import httpx
import typer

from bench import served as served_api
from bench.kernel_bench import _summary
from runtime.config import PROJECT_ROOT

RESULTS = PROJECT_ROOT / "bench" / "results"


async def _events(client: httpx.AsyncClient, path: str, auth: dict[str, str],
                  into: asyncio.Queue[dict[str, Any]]) -> None:
    async with client.stream("GET", path, headers=auth, timeout=None) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data:"):
                into.put_nowait(json.loads(line[5:]))


async def run(runs: int) -> dict[str, Any]:
    served = served_api.start("processes")
    report: dict[str, Any] = {"runs": runs, "load_before": os.getloadavg()}
    try:
        async with httpx.AsyncClient(base_url=served.url, timeout=120) as client:
            await served_api.until_up(client, served)
            auth, session = await served_api.user_session(client, served)
            events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
            reader = asyncio.create_task(_events(client, f"/v1/sessions/{session}/events",
                                                 auth, events))
            await asyncio.sleep(0.5)
            first_line, stops = [], []
            base = f"/v1/sessions/{session}/processes"
            try:
                for _ in range(runs):
                    began = time.perf_counter()
                    resp = await client.post(base, json={"command": "echo ready; sleep 600"},
                                             headers=auth)
                    if resp.status_code != 201:
                        raise RuntimeError(f"start failed: {resp.status_code} {resp.text}")
                    pid = resp.json()["id"]
                    while True:
                        event = await asyncio.wait_for(events.get(), 60)
                        if event.get("type") == "process_output" and \
                                event.get("process_id") == pid and "ready" in event["data"]:
                            break
                    first_line.append(time.perf_counter() - began)
                    began = time.perf_counter()
                    await client.delete(f"{base}/{pid}", headers=auth)
                    stops.append(time.perf_counter() - began)
            finally:
                reader.cancel()
            report["start_to_first_line"] = _summary(first_line)
            report["stop"] = _summary(stops)
    finally:
        served.stop()
    report["load_after"] = os.getloadavg()
    return report


def cli(runs: Annotated[int, typer.Option(help="processes started")] = 30) -> None:
    """Background process start -> first output line p50/p95 through the API."""
    report = asyncio.run(run(runs))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"processes-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    typer.echo(json.dumps(report, indent=2))
    typer.echo(f"written to {out}")
