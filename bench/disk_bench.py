"""Disk benchmark: what a disk of its own per session costs (``runtime.workspace.disk``).

Measured, interleaved so drift on a shared machine hits both alike:

- ``create``: ``Workspaces.create`` of a session, with a loop-mounted ext4 image of the
  default 1 GiB (``disk``) and as a plain directory (``plain``);
- ``open``: ``Workspaces.open`` of an existing, mounted session (the per-call path);
- ``exec_cold`` / ``exec_warm``: ``print(1)`` through ``DockerBackend`` with the workspace on
  the session's disk and on a plain directory (warm: the next container is ready first;
  the two kinds take turns going first).

Needs root and loop devices (what the server uses them for). Results go to
``bench/results/disk-<utc>.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer

from bench.exec_bench import COMMAND, RESULTS_DIR, summarize
from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.warm_pool import WarmPoolConfig
from runtime.sandbox.models import ExecRequest, Limits
from runtime.workspace import Workspaces
from runtime.workspace.disk import SessionDisks, loop_mounts_available
from runtime.workspace.mount_table import release_all_under

GiB = 1024 * 1024 * 1024
TENANT = "t_00000000000000be"


def _session() -> str:
    return "s_" + uuid.uuid4().hex[:16]


async def run_bench(image: str, runs: int) -> dict[str, Any]:
    data_dir = Path(tempfile.mkdtemp(prefix="navi-bench-disk-"))
    kinds = {
        "disk": Workspaces(data_dir / "disk", disks=SessionDisks(data_dir / "disk",
                                                               overcommit=1000.0)),
        "plain": Workspaces(data_dir / "plain"),
    }
    lat: dict[str, list[float]] = {f"{step}_{kind}": [] for step in ("create", "open")
                                   for kind in kinds}
    sessions: dict[str, list[str]] = {kind: [] for kind in kinds}
    try:
        for _ in range(runs):
            for kind, spaces in kinds.items():
                session = _session()
                started = time.perf_counter()
                spaces.create(TENANT, session, uid=200000, disk_bytes=GiB,
                              tenant_disk_bytes=1024 * GiB)
                lat[f"create_{kind}"].append(time.perf_counter() - started)
                started = time.perf_counter()
                spaces.open(TENANT, session).close()
                lat[f"open_{kind}"].append(time.perf_counter() - started)
                sessions[kind].append(session)
        config = DockerBackendConfig(data_dir=data_dir, workspaces_root=data_dir,
                                     instance_id=f"navi-bench-{uuid.uuid4().hex[:12]}")
        for mode, warm in (("cold", WarmPoolConfig(size=0)), ("warm", WarmPoolConfig(size=1))):
            backend = DockerBackend(config.model_copy(update={"warm": warm}))
            await backend.start()
            try:
                for kind in kinds:
                    lat[f"exec_{mode}_{kind}"] = []
                first = {kind: sessions[kind][0] for kind in kinds}
                for i in range(runs + 1):
                    order = list(kinds.items())  # alternate who goes first: no order bias
                    for kind, spaces in (order if i % 2 else order[::-1]):
                        request = ExecRequest(
                            image=image, argv=COMMAND, exec_id=f"b-{uuid.uuid4().hex[:12]}",
                            session=first[kind], uid=200000, limits=Limits(),
                            workspace=spaces.path(TENANT, first[kind]))
                        if warm.size:
                            deadline = time.monotonic() + 10
                            while (backend.warm.ready_count(first[kind]) < 1 and i
                                   and time.monotonic() < deadline):
                                await asyncio.sleep(0.005)
                        started = time.perf_counter()
                        result = await backend.run(request)
                        if result.stdout != b"1\n":
                            raise RuntimeError(f"call failed: {result}")
                        if i:  # the first call of each session warms caches
                            lat[f"exec_{mode}_{kind}"].append(time.perf_counter() - started)
            finally:
                await backend.close()
    finally:
        for spaces in kinds.values():
            spaces.close()
        release_all_under(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "benchmark": "disk",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "image": image, "runs": runs, "session_disk_bytes": GiB,
        "host": {"cpus": os.cpu_count(), "kernel": platform.release(),
                 "loadavg_after": os.getloadavg()},
        "latency": {name: summarize(values) for name, values in lat.items() if values},
    }


def write_results(results: dict[str, Any], out_dir: Path = RESULTS_DIR) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = out_dir / f"disk-{stamp}.json"
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return path


def cli(
    runs: int = typer.Option(30, "--runs", min=4, help="Sessions and calls per measurement."),
    image: str = typer.Option("navi/python:latest", "--image", help="Image for the exec runs."),
) -> None:
    """Cost of a disk per session: create, open, cold and warm exec vs a plain directory."""
    if not loop_mounts_available():
        typer.echo("error: needs root and loop devices (what session disks use)", err=True)
        raise typer.Exit(1)
    results = asyncio.run(run_bench(image, runs))
    path = write_results(results)
    for name, lat in results["latency"].items():
        typer.echo(f"{name:18} p50 {lat['p50_ms']:7.2f} ms  p95 {lat['p95_ms']:7.2f} ms")
    typer.echo(f"results: {path}")
