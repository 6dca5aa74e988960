"""Exec benchmark: every way a call can reach a container, all in one run on one host.

Paths, each running ``python3 -I -c 'print(1)'`` (what ``code_exec`` runs) in the same
image with the same hardening (network none, cap-drop ALL, no-new-privileges, project
seccomp profile, uid 65534, read-only root, /tmp tmpfs, pids/memory/cpu limits, ulimits,
--init, log driver none) and the same workspace bind mount:

- ``docker_run_rm``: a naive ``docker run --rm`` (CLI process per call);
- ``cold``: ``DockerBackend`` with the warm pool off (create → attach → start → … → remove);
- ``warm``: ``DockerBackend`` with a warm pool of 1 per session; before each call the bench
  waits until the session's next container is ready (an interactive caller's think time),
  then times the call alone;
- ``warm_api``, ``warm_api_httpx``: ``POST /v1/sessions/{id}/exec`` (``code_exec``, python)
  on a real ``navi serve`` on 127.0.0.1 (policy, audit intent fsync'd + outcome, HTTP),
  0.5 s apart, from a minimal HTTP/1.1 client and from httpx (``bench/exec_api.py``);
- ``warm_beside_api``: the ``warm`` call again, once in each round of the API's calls, so
  the API's overhead (``api_overhead_p50_ms``) compares calls made under the same load;
- ``ttfc``: time to first command: a new session's workspace and /tmp made, then its first
  call, on ``DockerBackend`` with the tenant's pool (``late_bind.py``: the session is bound
  into a container started before it); the bench waits until the tenant's pool has one
  ready (sessions opened slower than the pool refills);
- ``ttfc_api``: ``POST /v1/sessions`` then its first ``code_exec``, on the real server (its
  tenant's earlier sessions have filled the pool), from the minimal client.

``ratios``: each path's p50 over ``docker_run_rm``'s p50, measured in the same rounds (the
machine's load then hits both alike; ``host.loadavg_*`` says what it was).

Sequential latency interleaves naive, cold, warm and ttfc (A, B, C, D, A, …) so drift on a shared
machine hits them alike. Throughput: C clients (2, 4), each its own session, calling back to
back: ``warm`` (the session pool), ``pooled`` (the tenant pool) and ``pooled_exit`` (the
tenant pool, its used runners exiting by themselves instead of lingering until removed).
Memory: K idle warm containers, each measured from its memory cgroup and /proc.
Results: ``bench/results/exec-<utc>.json`` and a latency chart ``exec-<utc>.png``.
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
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.exec_api import api_latencies
from bench.exec_memory import idle_memory
from runtime.config import PROJECT_ROOT
from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.seccomp import DEFAULT_PROFILE_PATH
from runtime.sandbox.docker.warm_pool import WarmPoolConfig
from runtime.sandbox.models import ExecRequest, Limits

RESULTS_DIR = PROJECT_ROOT / "bench" / "results"
COMMAND = ["python3", "-I", "-c", "print(1)"]  # what code_exec runs for python
LIMITS = Limits()
CONCURRENCY = (2, 4)


ENGINE_RUNTIMES = {"runc": "runc", "gvisor": "runsc"}


def naive_argv(image: str, workspace: Path, instance_id: str, runtime: str = "runc"
               ) -> list[str]:
    """``docker run --rm`` with the flags our ContainerSpec sets."""
    return [
        "docker", "run", "--rm", "-i", "--runtime", ENGINE_RUNTIMES[runtime],
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


async def _timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def _throughput(call: Callable[[int], Awaitable[object]], runs: int, clients: int) -> float:
    """``clients`` loops (client ``i`` passes ``i``), ``runs`` calls in all, back to back."""

    async def client(index: int) -> None:
        for _ in range(runs // clients):
            await call(index)

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return round((runs // clients) * clients / (time.perf_counter() - started), 2)


SESSION_LETTER = {"warm": "w", "pooled": "p", "pooled_exit": "x"}  # throughput's sessions


class Paths:
    """The three in-process paths, sharing one data dir and one instance label."""

    def __init__(self, image: str, runtime: str = "runc") -> None:
        self.image = image
        self.limits = LIMITS.model_copy(update={"runtime": runtime})
        self.data_dir = Path(tempfile.mkdtemp(prefix="navi-bench-"))
        self.instance_id = f"navi-bench-{uuid.uuid4().hex[:12]}"
        self.tenant = "local"  # the backend's cgroup parent is /navi/<tenant>
        self.root = self.data_dir / "workspaces"
        self.root.mkdir()
        config = DockerBackendConfig(
            data_dir=self.data_dir, workspaces_root=self.root, instance_id=self.instance_id
        )
        self.cold_backend = DockerBackend(config)
        self.warm_backend = DockerBackend(
            config.model_copy(update={"warm": WarmPoolConfig(size=1, idle_s=120)})
        )
        self.pooled_backend = DockerBackend(config.model_copy(
            update={"warm": WarmPoolConfig(size=1, idle_s=120, late_bind=True)}))
        # the same, its used runners exiting by themselves (removed once stopped), not
        # lingering until removed: throughput only
        self.pooled_exit_backend = DockerBackend(self.pooled_backend.config.model_copy(
            update={"warm_linger": False}))
        self.naive = naive_argv(image, self.workspace("naive"), self.instance_id, runtime)

    def workspace(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(exist_ok=True)
        return path

    async def call(self, backend: DockerBackend, session: str, *, tmp: bool = False) -> bool:
        """One call; True when it ran in a warm container. ``tmp``: the session has its
        own /tmp directory (as the server's sessions do) beside its workspace."""
        before = backend.warm.stats["taken"] + backend.warm.stats["waited"]
        request = ExecRequest(
            image=self.image, argv=COMMAND, exec_id=f"b-{uuid.uuid4().hex[:12]}",
            session=session, workspace=self.workspace(session), limits=self.limits,
            tenant=self.tenant, tmp=self.workspace(f"{session}-tmp") if tmp else None,
        )  # fmt: skip
        result = await backend.run(request)
        if result.stdout != b"1\n":
            raise RuntimeError(f"backend call failed: {result}")
        return backend.warm.stats["taken"] + backend.warm.stats["waited"] > before

    async def docker_run(self) -> None:
        done = await asyncio.to_thread(subprocess.run, self.naive, capture_output=True)
        if done.stdout != b"1\n":
            raise RuntimeError(f"docker run failed: {done.stderr.decode(errors='replace')}")

    async def warm_ready(self, session: str, timeout_s: float = 10,
                         backend: DockerBackend | None = None) -> None:
        pool = (backend or self.warm_backend).warm
        deadline = time.monotonic() + timeout_s
        while pool.ready_count(session) < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    async def first_call(self) -> bool:
        """A new session's first call, its workspace and /tmp made just before (TTFC)."""
        return await self.call(self.pooled_backend, f"ttfc-{uuid.uuid4().hex[:10]}", tmp=True)

    async def pool_ready(self) -> None:
        """gVisor has no tenant pool (docs/sandbox.md): its new sessions' first calls are cold."""
        if self.limits.runtime == "runc":
            await self.warm_ready(f"@{self.tenant}", backend=self.pooled_backend)

    async def close(self) -> list[str]:
        await self.cold_backend.close()
        await self.warm_backend.close()
        await self.pooled_backend.close()
        await self.pooled_exit_backend.close()
        return []


async def run_bench(image: str, runs: int, api: bool = True, runtime: str = "runc"
                    ) -> dict[str, Any]:
    """``runtime``: the tier of every path but ``warm_api`` (the API runs code_exec under the
    default policy's tier, runc)."""
    paths = Paths(image, runtime)
    lat: dict[str, list[float]] = {"docker_run_rm": [], "cold": [], "warm": [], "ttfc": []}
    served_warm = ttfc_warm = 0
    out: dict[str, Any] = {"host": {"loadavg_before": os.getloadavg()}}
    try:
        await paths.cold_backend.start()
        await paths.warm_backend.start()
        await paths.pooled_backend.start()
        await paths.pooled_exit_backend.start()
        await paths.call(paths.cold_backend, "cold")  # warm-up: engine caches, connections
        await paths.call(paths.warm_backend, "warm")  # the first call of a session is cold
        await paths.first_call()  # the tenant's first call ever is cold
        await paths.docker_run()
        for _ in range(runs):
            lat["docker_run_rm"].append(await _timed(paths.docker_run))
            lat["cold"].append(await _timed(lambda: paths.call(paths.cold_backend, "cold")))
            await paths.warm_ready("warm")
            started = time.perf_counter()
            served_warm += await paths.call(paths.warm_backend, "warm")
            lat["warm"].append(time.perf_counter() - started)
            await paths.pool_ready()
            started = time.perf_counter()
            ttfc_warm += await paths.first_call()
            lat["ttfc"].append(time.perf_counter() - started)
        if api:  # the API's calls, with a bare warm call beside each (same load, same rounds)

            async def bare_warm() -> float:
                await paths.warm_ready("warm")
                started = time.perf_counter()
                await paths.call(paths.warm_backend, "warm")
                return time.perf_counter() - started

            api_lat, out["api_warm_share"] = await api_latencies(
                runs, bare_warm, lambda: _timed(paths.docker_run))
            lat.update(api_lat)
        throughput: dict[str, dict[str, float]] = {}
        pool: dict[str, dict[str, int]] = {}  # warm throughput: launched vs taken + missed
        for clients in CONCURRENCY:

            def cold(i: int) -> Awaitable[bool]:
                return paths.call(paths.cold_backend, f"tc{i}")

            def warm(i: int, c: int = clients) -> Awaitable[bool]:
                return paths.call(paths.warm_backend, f"tw{c}-{i}")  # new sessions per round

            def pooled(i: int, c: int = clients) -> Awaitable[bool]:
                return paths.call(paths.pooled_backend, f"tp{c}-{i}", tmp=True)

            def pooled_exit(i: int, c: int = clients) -> Awaitable[bool]:
                return paths.call(paths.pooled_exit_backend, f"tx{c}-{i}", tmp=True)

            rates = {"docker_run_rm": await _throughput(lambda i: paths.docker_run(), runs,
                                                        clients),
                     "cold": await _throughput(cold, runs, clients)}
            for name, backend, calls in (("warm", paths.warm_backend, warm),
                                         ("pooled", paths.pooled_backend, pooled),
                                         ("pooled_exit", paths.pooled_exit_backend,
                                          pooled_exit)):
                before = Counter(backend.warm.stats)
                rates[name] = await _throughput(calls, runs, clients)
                for i in range(clients):  # a session pool's surplus is discarded here
                    await backend.release_session(f"t{SESSION_LETTER[name]}{clients}-{i}")
                used = Counter(backend.warm.stats) - before
                used["surplus_discarded"] = max(0, used["launched"] - used["taken"]
                                                - used["waited"] - backend.warm.ready_count())
                pool[f"{clients}_clients_{name}"] = dict(used)
            throughput[f"{clients}_clients"] = rates
        await paths.warm_backend.release_session("warm")
        memory = await idle_memory(paths, count=4)
        warm_stats = dict(paths.warm_backend.warm.stats)
    finally:
        await paths.close()
        leftovers = await _sweep(paths)
        shutil.rmtree(paths.data_dir, ignore_errors=True)
    out.update(
        {
            "benchmark": "exec",
            "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
            "image": image,
            "runtime": runtime,
            "command": COMMAND,
            "runs": runs,
            "host": {
                **out["host"],
                "cpus": os.cpu_count(),
                "kernel": platform.release(),
                "python": platform.python_version(),
                "loadavg_after": os.getloadavg(),
            },
            "latency": {name: summarize(values) for name, values in lat.items() if values},
            "latency_raw_ms": {k: [round(x * 1000, 2) for x in v] for k, v in lat.items()},
            "api_overhead_p50_ms": api_overhead(lat),
            "warm_calls_served_warm": f"{served_warm}/{runs}",
            "ttfc_calls_served_warm": f"{ttfc_warm}/{runs}",
            "ratios": ratios(lat),
            "warm_pool_stats": warm_stats,
            "throughput_per_s": throughput,
            # launched - taken - waited: ready containers never used (the sessions' surplus)
            "throughput_warm_pool": pool,
            "idle_warm_memory": memory,
            "leftover_containers": len(leftovers),
        }
    )
    return out


def ratios(lat: dict[str, list[float]]) -> dict[str, float]:
    """Each path's p50 over ``docker_run_rm``'s p50 (same run, same rounds)."""
    if not lat.get("docker_run_rm"):
        return {}
    base = summarize(lat["docker_run_rm"])["p50_ms"]
    out = {f"{name}_p50_over_docker_run": round(summarize(v)["p50_ms"] / base, 3)
           for name, v in lat.items() if v and not name.startswith("docker_run")}
    if lat.get("ttfc_api") and lat.get("docker_run_beside_ttfc"):  # the API's own rounds
        out["ttfc_api_p50_over_docker_run_beside"] = round(
            summarize(lat["ttfc_api"])["p50_ms"]
            / summarize(lat["docker_run_beside_ttfc"])["p50_ms"], 3)
    return out


def api_overhead(lat: dict[str, list[float]]) -> dict[str, float]:
    """What the API adds to a warm call, p50 against p50, per client: against the bare warm
    calls made in the same rounds when there are any, else against ``warm``."""
    beside = lat.get("warm_beside_api") or lat.get("warm")
    if not beside:
        return {}
    warm = summarize(beside)["p50_ms"]
    return {name: round(summarize(values)["p50_ms"] - warm, 1)
            for name, values in lat.items() if name.startswith("warm_api") and values}


async def _sweep(paths: Paths) -> list[str]:
    """Anything left with our instance label (the naive ones included): removed, counted."""
    sweeper = DockerBackend(
        DockerBackendConfig(
            data_dir=paths.data_dir, workspaces_root=paths.root,
            instance_id=paths.instance_id, harden_workspaces_root=False,
        )
    )  # fmt: skip
    await sweeper.start()
    try:
        return await sweeper.reaper().reconcile_startup()
    finally:
        await sweeper.close()


def write_results(results: dict[str, Any], out_dir: Path = RESULTS_DIR) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = out_dir / f"exec-{stamp}.json"
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    chart(results, path.with_suffix(".png"))
    return path


def chart(results: dict[str, Any], path: Path) -> None:
    """Box plot of the per-call latencies of every path (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    raw = {k: v for k, v in results["latency_raw_ms"].items() if v}
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.boxplot(list(raw.values()), tick_labels=list(raw.keys()), whis=(5, 95), showfliers=True)
    ax.set_yscale("log")
    ax.set_ylabel("latency per call, ms (log)")
    ax.set_title(f"python3 -I -c 'print(1)', {results['runs']} calls each, whiskers p5-p95")
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
