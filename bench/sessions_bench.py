"""`navi bench sessions`: what many sessions cost when most of them are at rest.

One real `navi serve` (default policy, strict disk admission: `NAVI_DISK_OVERCOMMIT=1`, a
short `NAVI_SESSION_IDLE_S`) and N sessions (`--sessions`, default 10,000) spread over
tenants of `sessions_per_tenant` (100) each, through the HTTP API:

1. **create** every session (8 clients at once): p50/p95 latency; each new session's 1 GiB
   disk is mounted, and the tenant's 10 GiB quota releases its least recently used ones;
2. **first call** (`terminal`, `echo`) in a random N/10 of them (4 clients at once): p50/p95,
   a cold container and the disk mounted again;
3. **idle release**: how long until no session disk is mounted, and until no loop device is
   left (a lazily detached disk's loop device goes with its last user: the warm containers
   being removed).

Sampled throughout: session mounts under the data dir, loop devices backed by its images,
and the RSS of the server (and its mount guard). Needs root and loop devices (what session
disks use). Results go to ``bench/results/sessions-<utc>.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import typer

from bench.exec_api import _free_port, _until_up, stop_server
from bench.exec_bench import summarize
from runtime.config import PROJECT_ROOT
from runtime.workspace.disk import loop_mounts_available
from runtime.workspace.mount_table import mounts_under, release_all_under

RESULTS = PROJECT_ROOT / "bench" / "results"
PER_TENANT = 100  # the default sessions_per_tenant
IDLE_S = 5.0


class Sampler:
    """Mounts, loop devices and RSS, every ``interval`` seconds, with their peaks."""

    def __init__(self, data_dir: Path, pid: int) -> None:
        self.data_dir, self.pid = data_dir, pid
        self.peak = {"mounts": 0, "loops": 0, "rss_mib": 0.0}

    def mounts(self) -> int:
        return sum(1 for p in mounts_under(self.data_dir) if Path(p).name.startswith("s_"))

    def loops(self) -> int:
        out = subprocess.run(["losetup", "-l", "-n", "-O", "BACK-FILE"], capture_output=True,
                             text=True, check=False).stdout.split()
        return sum(1 for f in out if f.startswith(str(self.data_dir)))

    def rss_mib(self) -> float:
        total = 0
        pids = [self.pid, *subprocess.run(["pgrep", "-P", str(self.pid)], capture_output=True,
                                          text=True, check=False).stdout.split()]
        for pid in pids:
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except OSError:
                continue
        return round(total / 1024, 1)

    def now(self) -> dict[str, float]:
        seen = {"mounts": self.mounts(), "loops": self.loops(), "rss_mib": self.rss_mib()}
        for key, value in seen.items():
            self.peak[key] = max(self.peak[key], value)
        return seen

    async def run(self, interval: float) -> None:
        while True:
            await asyncio.to_thread(self.now)
            await asyncio.sleep(interval)


async def _gather(n: int, work: Any, items: list[Any]) -> list[Any]:
    queue: asyncio.Queue[Any] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)
    results: list[Any] = []

    async def worker() -> None:
        while not queue.empty():
            results.append(await work(queue.get_nowait()))

    await asyncio.gather(*(worker() for _ in range(n)))
    return results


async def run_bench(sessions: int, calls: int, seed: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="navi-bench-sessions-"))
    data_dir, port, admin = tmp / "data", _free_port(), "navi_admin_" + secrets.token_hex(16)
    policy = tmp / "policy.yaml"
    policy.write_text((PROJECT_ROOT / "policies" / "default.yaml").read_text().replace(
        "execs_per_minute: 60", "execs_per_minute: 100000"))
    env = {**os.environ, "NAVI_ADMIN_TOKEN": admin, "NAVI_DATA_DIR": str(data_dir),
           "NAVI_LOG_FORMAT": "json", "NAVI_LOG_LEVEL": "warning",
           "NAVI_DISK_OVERCOMMIT": "1", "NAVI_SESSION_IDLE_S": str(IDLE_S)}
    log = tmp / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "runtime.cli", "serve", "--host", "127.0.0.1", "--port",
             str(port), "--policy", str(policy)],
            cwd=PROJECT_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    sampler = Sampler(data_dir, server.pid)
    phases: dict[str, Any] = {}
    lat: dict[str, list[float]] = {"create": [], "first_call": []}
    failures: dict[str, int] = {}
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
            await _until_up(client, server, log)
            phases["start"] = sampler.now()
            tokens = []
            for t in range(-(-sessions // PER_TENANT)):
                head = {"Authorization": f"Bearer {admin}"}
                tenant = (await client.post("/v1/tenants", json={"name": f"b{t}"},
                                            headers=head)).json()["id"]
                tokens.append((await client.post(f"/v1/tenants/{tenant}/tokens",
                                                 json={"role": "user"},
                                                 headers=head)).json()["token"])
            sampling = asyncio.create_task(sampler.run(1.0))

            async def create(i: int) -> tuple[str, str] | None:
                token = tokens[i // PER_TENANT]
                started = time.perf_counter()
                resp = await client.post("/v1/sessions", json={},
                                         headers={"Authorization": f"Bearer {token}"})
                lat["create"].append(time.perf_counter() - started)
                if resp.status_code != 201:
                    failures[f"create_{resp.status_code}"] = failures.get(
                        f"create_{resp.status_code}", 0) + 1
                    return None
                return token, str(resp.json()["id"])

            started = time.monotonic()
            made = [m for m in await _gather(8, create, list(range(sessions))) if m]
            phases["created"] = {**sampler.now(), "seconds": round(time.monotonic() - started, 1)}

            async def call(made_one: tuple[str, str]) -> None:
                token, session = made_one
                started = time.perf_counter()
                resp = await client.post(
                    f"/v1/sessions/{session}/exec", headers={"Authorization": f"Bearer {token}"},
                    json={"tool": "terminal", "args": {"command": "echo hi > f; cat f"}})
                lat["first_call"].append(time.perf_counter() - started)
                if resp.status_code != 200 or resp.json().get("stdout") != "hi\n":
                    key = f"call_{resp.status_code}"
                    failures[key] = failures.get(key, 0) + 1

            started = time.monotonic()
            await _gather(4, call, random.Random(seed).sample(made, min(calls, len(made))))
            phases["called"] = {**sampler.now(), "seconds": round(time.monotonic() - started, 1)}
            started = time.monotonic()
            while sampler.mounts() and time.monotonic() - started < 30 * IDLE_S:
                await asyncio.sleep(0.5)
            phases["idle"] = {**sampler.now(), "seconds": round(time.monotonic() - started, 1)}
            while sampler.loops() and time.monotonic() - started < 60 * IDLE_S:
                await asyncio.sleep(0.5)  # a loop device goes when its last user does
            phases["idle_loops_gone"] = {**sampler.now(),
                                         "seconds": round(time.monotonic() - started, 1)}
            sampling.cancel()
    finally:
        stop_server(server)
        phases["stopped"] = {"mounts": sampler.mounts(), "loops": sampler.loops()}
        used = sum(p.stat().st_blocks * 512 for p in data_dir.glob("workspaces/t_*/s_*.img"))
        release_all_under(data_dir)
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "benchmark": "sessions",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "sessions": sessions, "tenants": len(tokens), "calls": calls,
        "session_idle_s": IDLE_S, "session_disk_mb": 1024, "tenant_disk_mb": 10240,
        "images_bytes_on_disk": used,
        "host": {"cpus": os.cpu_count(), "kernel": platform.release(),
                 "loadavg_after": os.getloadavg()},
        "phases": phases, "peak": sampler.peak, "failures": failures,
        "latency": {name: summarize(values) for name, values in lat.items() if values},
    }


def cli(
    sessions: int = typer.Option(10_000, "--sessions", min=10, help="Sessions to make."),
    calls: int = typer.Option(0, "--calls", min=0,
                              help="Sessions that get a call (default: sessions / 10)."),
    seed: int = typer.Option(1, "--seed", help="Which sessions get a call."),
) -> None:
    """N sessions over tenants in one server: create, a call in N/10, idle release."""
    if not loop_mounts_available():
        typer.echo("error: needs root and loop devices (what session disks use)", err=True)
        raise typer.Exit(1)
    results = asyncio.run(run_bench(sessions, calls or max(1, sessions // 10), seed))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"sessions-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    for name, value in results["latency"].items():
        typer.echo(f"{name:11} p50 {value['p50_ms']:8.1f} ms  p95 {value['p95_ms']:8.1f} ms")
    typer.echo(f"phases {json.dumps(results['phases'])}")
    typer.echo(f"peak {json.dumps(results['peak'])}  failures {results['failures']}")
    typer.echo(f"results: {path}")
