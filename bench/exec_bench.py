"""Exec benchmark: our ``DockerBackend`` next to a naive ``docker run --rm``, same run, same host.

Both run ``python3 -c 'print(1)'`` in the same image with the same hardening (network none,
cap-drop ALL, no-new-privileges, project seccomp profile, uid 65534, read-only root, /tmp
tmpfs, pids/memory/cpu limits, ulimits, --init, log driver none) and the same workspace
bind mount. Sequential latency alternates the two (A, B, A, B, …) so drift on a shared
machine hits both alike; throughput runs ``runs`` calls with ``concurrency`` in flight.
Results go to ``bench/results/exec-<utc timestamp>.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runtime.config import PROJECT_ROOT
from runtime.sandbox.docker_backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.models import ExecRequest, Limits
from runtime.sandbox.seccomp import DEFAULT_PROFILE_PATH

RESULTS_DIR = PROJECT_ROOT / "bench" / "results"
COMMAND = ["python3", "-c", "print(1)"]
LIMITS = Limits()


def naive_argv(image: str, workspace: Path, instance_id: str) -> list[str]:
    """``docker run --rm`` with the flags our ContainerSpec sets."""
    return [
        "docker", "run", "--rm", "-i",
        "--network", "none", "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges",
        "--security-opt", f"seccomp={DEFAULT_PROFILE_PATH}",
        "--user", "65534:65534", "--read-only",
        "--tmpfs", f"/tmp:rw,noexec,nosuid,nodev,size={LIMITS.tmp_mb}m",
        "-e", "HOME=/tmp", "-e", "LANG=C.UTF-8",
        "--pids-limit", str(LIMITS.pids),
        "--memory", f"{LIMITS.memory_mb}m", "--memory-swap", f"{LIMITS.memory_mb}m",
        "--cpus", str(LIMITS.cpus),
        "--ulimit", f"nofile={LIMITS.nofile}:{LIMITS.nofile}",
        "--ulimit", f"fsize={LIMITS.fsize_mb * 1024 * 1024}",
        "--ulimit", "core=0",
        "--ipc", "private", "--cgroupns", "private",
        "--init", "--log-driver", "none",
        "--label", f"navi.instance={instance_id}",
        "--mount", f"type=bind,source={workspace},target=/workspace", "-w", "/workspace",
        image, *COMMAND,
    ]  # fmt: skip


def summarize(latencies_s: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in latencies_s)
    quantiles = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else ms * 99
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 1),
        "p95_ms": round(quantiles[94], 1),
        "mean_ms": round(statistics.fmean(ms), 1),
        "min_ms": round(ms[0], 1),
        "max_ms": round(ms[-1], 1),
    }


async def _timed(call: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def _throughput(call: Callable[[], Awaitable[None]], runs: int, concurrency: int) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            await call()

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(runs)))
    return round(runs / (time.perf_counter() - started), 2)


async def run_bench(image: str, runs: int, concurrency: int) -> dict[str, Any]:
    data_dir = Path(tempfile.mkdtemp(prefix="navi-bench-"))
    instance_id = f"navi-bench-{uuid.uuid4().hex[:12]}"
    workspace = data_dir / "workspaces" / "bench"
    workspace.mkdir(parents=True)
    backend = DockerBackend(
        DockerBackendConfig(
            data_dir=data_dir, workspaces_root=data_dir / "workspaces", instance_id=instance_id
        )
    )
    naive = naive_argv(image, workspace, instance_id)

    async def ours() -> None:
        request = ExecRequest(
            image=image,
            argv=COMMAND,
            exec_id=f"b-{uuid.uuid4().hex[:12]}",
            session="bench",
            workspace=workspace,
            limits=LIMITS,
        )
        result = await backend.run(request)
        if result.stdout != b"1\n":
            raise RuntimeError(f"backend call failed: {result}")

    async def docker_run() -> None:
        done = await asyncio.to_thread(subprocess.run, naive, capture_output=True, check=False)
        if done.stdout != b"1\n":
            raise RuntimeError(f"docker run failed: {done.stderr.decode(errors='replace')}")

    try:
        await backend.start()
        await ours()  # warm-up: engine caches, the image, our client's connections
        await docker_run()
        lat_ours, lat_naive = [], []
        for _ in range(runs):
            lat_ours.append(await _timed(ours))
            lat_naive.append(await _timed(docker_run))
        tput_ours = await _throughput(ours, runs, concurrency)
        tput_naive = await _throughput(docker_run, runs, concurrency)
        leftovers = await backend.reaper().reconcile_startup()  # also sweeps the naive ones
    finally:
        await backend.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "benchmark": "exec",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "image": image,
        "command": COMMAND,
        "runs": runs,
        "concurrency": concurrency,
        "host": {
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
        },
        "backend": {
            "latency": summarize(lat_ours),
            "throughput_per_s": tput_ours,
        },
        "docker_run_rm": {
            "latency": summarize(lat_naive),
            "throughput_per_s": tput_naive,
        },
        "leftover_containers": len(leftovers),
    }


def write_results(results: dict[str, Any], out_dir: Path = RESULTS_DIR) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = out_dir / f"exec-{stamp}.json"
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return path
