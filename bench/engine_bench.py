"""`navi bench engine`: CPU per call of each part of the engine, per path (issue 32).

A call's latency hides work done off its clock (a warm call's container was created and
started before it, the used one is removed after it); the machine pays for it all the same,
and what it pays per call bounds the calls per second of a node. Per path, ``calls`` calls
of ``python3 -I -c 'print(1)'`` (``bench/exec_bench.py``'s image, flags and hardening) run
back to back after a warm-up, each path's containers under a cgroup of its own
(``/navi/<tenant>``); the window ends when every container it started has been removed
(warm: when the next one is ready again, so the window holds ``calls`` whole lifecycles).
``bench/engine_acct.py`` reads what each component used in the window.

Paths: ``docker_run_rm`` (the docker CLI, ``--rm``), ``cold`` and ``warm`` (``DockerBackend``
in this process, warm pool off / one per session), ``gvisor_cold``, ``gvisor_warm`` (runsc),
and a candidate, ``runc_direct``: ``runc run`` on an OCI bundle of the same image and
hardening (``bench/runc_bundle.py``; no dockerd, containerd or shim: runc is this process's
child, its time in ``runc``, the container's in ``container``). Not in the default set.
Result: ``bench/results/engine-<utc>.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer

from bench.engine_acct import (
    ShimTracker,
    Snapshot,
    daemon_pids,
    foreign_started,
    shim_window,
    snapshot,
)
from bench.exec_bench import COMMAND, RESULTS_DIR, Paths, _sweep
from bench.runc_bundle import Bundle
from runtime.config import Settings
from runtime.logging import configure_logging
from runtime.sandbox.docker.backend import DockerBackend

PATHS = {  # name → (tier, how a call runs)
    "docker_run_rm": ("runc", "docker"),
    "cold": ("runc", "cold"),
    "warm": ("runc", "warm"),
    "warm_exit": ("runc", "warm"),  # the used runner exits by itself, removed once stopped
    "gvisor_cold": ("gvisor", "cold"),
    "gvisor_warm": ("gvisor", "warm"),
    "runc_direct": ("runc", "direct"),
}
DEFAULT_PATHS = [name for name in PATHS if name not in ("runc_direct", "warm_exit")]
ENGINE = ("dockerd", "containerd", "shim_bootstrap", "shim", "runc")
COMPONENTS = (*ENGINE, "container", "supervisor")
SETTLE_S = 0.2  # after the last container is gone: the daemons' trailing bookkeeping


def _delta(end: Any, begin: Any, attr: str) -> float:
    return float(getattr(end, attr) - getattr(begin, attr)) if end and begin else 0.0


def breakdown(tracker: ShimTracker, begin: Snapshot, end: Snapshot, calls: int,
              cores: int, removed_running: bool = False, direct: bool = False
              ) -> dict[str, Any]:
    """Seconds → ms per call for every component, the totals and the ceilings they imply.

    runc/runsc is what the shims reaped minus what of the container reached them: all of
    its cgroup when its processes end on their own; when the container is removed while its
    runner still lingers (``removed_running``, warm) the kernel reaps the namespace's
    processes itself (their time reaches no one) and only the init's own time (tini), read
    by the tracker while it idled, reaches the shim."""
    shims = shim_window(tracker, begin, end)
    container = end.cgroup_s - begin.cgroup_s
    reached = shims["kids_reaped_s"] if removed_running else container
    docker_b, docker_e = begin.daemons.get("dockerd"), end.daemons.get("dockerd")
    ctrd_b, ctrd_e = begin.daemons.get("containerd"), end.daemons.get("containerd")
    seconds = {
        "dockerd": _delta(docker_e, docker_b, "self_s") + _delta(docker_e, docker_b,
                                                                 "children_s"),
        "containerd": _delta(ctrd_e, ctrd_b, "self_s"),
        "shim_bootstrap": _delta(ctrd_e, ctrd_b, "children_s"),
        "shim": shims["shim_s"],
        "runc": shims["shim_children_s"] - reached,
        "container": container,
        "supervisor": (end.self_s - begin.self_s) + (end.children_s - begin.children_s),
    }
    if direct:  # runc is our child: what it reaped but the container's is its own
        seconds["runc"] = (end.children_s - begin.children_s) - container
        seconds["supervisor"] = end.self_s - begin.self_s
    ms = {k: round(v * 1000 / calls, 2) for k, v in seconds.items()}
    engine = sum(seconds[k] for k in ENGINE)
    total = engine + seconds["container"] + seconds["supervisor"]
    machine = end.machine_s - begin.machine_s
    wall = end.at - begin.at
    return {
        "calls": calls,
        "cpu_ms_per_call": ms,
        "engine_ms_per_call": round(engine * 1000 / calls, 2),
        "total_ms_per_call": round(total * 1000 / calls, 2),
        "ceiling_calls_per_s": round(cores * calls / total, 1) if total > 0 else None,
        "engine_ceiling_calls_per_s": round(cores * calls / engine, 1) if engine > 0 else None,
        "machine_busy_ms_per_call": round(machine * 1000 / calls, 2),
        "unattributed_ms_per_call": round((machine - total) * 1000 / calls, 2),
        "window_s": round(wall, 3),
        "shims": {k: shims[k] for k in ("started", "exited", "not_final")},
        "runc_ms_if_container_reached_shim": round(
            (shims["shim_children_s"] - container) * 1000 / calls, 2),
        "runc_ms_from_sampled_inits": round(
            (shims["shim_children_s"] - shims["kids_reaped_s"]) * 1000 / calls, 2),
        "foreign_containers_started": foreign_started(tracker, begin, end),
        "tracker_cpu_ms": round((end.tracker_cpu_s - begin.tracker_cpu_s) * 1000, 1),
    }


class PathRun:
    """One path's calls, under its own tenant cgroup."""

    def __init__(self, name: str, image: str, prefix: str) -> None:
        self.name = name
        self.tier, self.kind = PATHS[name]
        self.paths = Paths(image, self.tier)
        self.paths.tenant = f"{prefix}-{name.replace('_', '-')}"
        self.cgroup = f"/navi/{self.paths.tenant}"
        argv = self.paths.naive
        at = argv.index(image)
        self.paths.naive = [*argv[:at], "--cgroup-parent", self.cgroup, *argv[at:]]
        self.served_warm = 0
        if name == "warm_exit":
            config = self.paths.warm_backend.config.model_copy(update={"warm_linger": False})
            self.paths.warm_backend = DockerBackend(config)
        self.bundle: Bundle | None = None
        if self.kind == "direct":
            self.bundle = Bundle(image, self.paths.workspace("s"), self.cgroup,
                                 self.paths.data_dir / "bundle", list(COMMAND))

    @property
    def backend(self) -> Any:
        return self.paths.warm_backend if self.kind == "warm" else self.paths.cold_backend

    async def call(self, wait: bool = True) -> None:
        if self.kind == "docker":
            await self.paths.docker_run()
            return
        if self.bundle is not None:
            if await asyncio.to_thread(self.bundle.run) != b"1\n":
                raise RuntimeError("runc_direct: unexpected output")
            return
        if self.kind == "warm" and wait:
            await self.ready()
        self.served_warm += await self.paths.call(self.backend, "s")

    async def ready(self, timeout_s: float = 20) -> None:
        deadline = time.monotonic() + timeout_s
        while self.backend.warm.ready_count("s") < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)  # few wake-ups: this process's CPU is the supervisor's

    async def settle(self, tracker: ShimTracker, timeout_s: float = 20) -> None:
        """Until the calls' containers are gone (warm: and the next one is ready)."""
        deadline = time.monotonic() + timeout_s
        expect = 1 if self.kind == "warm" else 0
        while time.monotonic() < deadline:
            if self.kind == "warm":
                await self.ready()
            if tracker.ours_alive(self.cgroup + "/") <= expect and not self.backend._removals:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(SETTLE_S)

    async def run(self, tracker: ShimTracker, daemons: dict[str, int], calls: int,
                  cores: int) -> dict[str, Any]:
        if self.bundle is not None:
            await asyncio.to_thread(self.bundle.make)
        elif self.kind != "docker":
            await self.backend.start()
        for first in (True, False):  # warm-up: caches; a warm session's first call is cold
            await self.call(wait=not first)
        self.served_warm = 0
        await self.settle(tracker)
        idle_b = snapshot(tracker, daemons, self.cgroup)
        await asyncio.sleep(1.0)
        idle_e = snapshot(tracker, daemons, self.cgroup)
        begin = snapshot(tracker, daemons, self.cgroup)
        for _ in range(calls):
            await self.call()
        await self.settle(tracker)
        end = snapshot(tracker, daemons, self.cgroup)
        # under gVisor the sandbox is no idle tini: its teardown after the kill reaches the shim
        # too, so its samples would count it twice; the cgroup gives runsc a lower bound there
        removed_running = self.name == "warm"  # runc; warm_exit's runner exits by itself
        out = breakdown(tracker, begin, end, calls, cores, removed_running,
                        direct=self.bundle is not None)
        out["runc_from"] = "sampled_inits" if removed_running else "container_cgroup"
        idle = breakdown(tracker, idle_b, idle_e, 1, cores)["cpu_ms_per_call"]
        out["idle_ms_per_s"] = {  # the daemons with no call of ours (others' work included)
            k: round(idle[k] / (idle_e.at - idle_b.at), 2) for k in ("dockerd", "containerd")}
        out["idle_ms_per_s"]["machine"] = round(
            (idle_e.machine_s - idle_b.machine_s) * 1000 / (idle_e.at - idle_b.at), 1)
        if self.kind == "warm":
            out["served_warm"] = f"{self.served_warm}/{calls}"
        return out

    async def close(self) -> int:
        if self.bundle is not None:
            self.bundle.close()
        await self.paths.close()
        leftovers = len(await _sweep(self.paths))
        shutil.rmtree(self.paths.data_dir, ignore_errors=True)
        for hierarchy in Path("/sys/fs/cgroup").iterdir():  # docker leaves the parent behind
            try:
                (hierarchy / self.cgroup.lstrip("/")).rmdir()
            except OSError:
                pass
        return leftovers


async def run_bench(image: str, calls: int, names: list[str]) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    prefix = f"benchengine-{uuid.uuid4().hex[:8]}"
    tracker = ShimTracker(cgroup_prefix=f"/navi/{prefix}-", interval_s=0.02)
    daemons = daemon_pids()
    if set(daemons) != {"dockerd", "containerd"}:
        raise RuntimeError(f"dockerd and containerd not both found in /proc: {daemons}")
    tracker.start()
    results: dict[str, Any] = {}
    leftovers = 0
    load_before = os.getloadavg()
    try:
        for name in names:
            path = PathRun(name, image, prefix)
            try:
                results[name] = await path.run(tracker, daemons, calls, cores)
            finally:
                leftovers += await path.close()
    finally:
        tracker.stop()
    return {
        "benchmark": "engine",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "image": image,
        "command": COMMAND,
        "calls": calls,
        "host": {
            "cpus": cores,
            "kernel": platform.release(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
            "cgroup": "v1 cpuacct",
        },
        "paths": results,
        "leftover_containers": leftovers,
    }


def write_results(results: dict[str, Any], out_dir: Path = RESULTS_DIR) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"engine-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return path


def table(results: dict[str, Any]) -> str:
    head = ["path", *COMPONENTS, "engine", "total", "ceiling/s", "machine"]
    lines = [" ".join(f"{h:>14}" for h in head)]
    for name, row in results["paths"].items():
        cells = [name, *(row["cpu_ms_per_call"][k] for k in COMPONENTS),
                 row["engine_ms_per_call"], row["total_ms_per_call"],
                 row["ceiling_calls_per_s"], row["machine_busy_ms_per_call"]]
        lines.append(" ".join(f"{c:>14}" for c in cells))
    return "\n".join(lines)


def cli(
    calls: int = typer.Option(30, "--calls", min=2, help="Calls per path."),
    paths: str = typer.Option(",".join(DEFAULT_PATHS), "--paths",
                              help="Comma-separated paths (also: runc_direct)."),
    image: str = typer.Option("navi/python:latest", "--image", help="Image of the calls."),
    out: str = typer.Option(str(RESULTS_DIR), "--out", help="Directory for the JSON result."),
) -> None:
    """CPU ms per call of dockerd, containerd, shims, runc/runsc, the container and the
    supervisor, per path; the calls/s ceiling that total implies on this machine's cores."""
    names = [p.strip() for p in paths.split(",") if p.strip()]
    if unknown := [n for n in names if n not in PATHS]:
        raise typer.BadParameter(f"unknown path(s) {unknown}; known: {', '.join(PATHS)}")
    if not Path("/sys/fs/cgroup/cpuacct").is_dir() or os.geteuid() != 0:
        typer.echo("error: needs root and the cgroup v1 cpuacct hierarchy", err=True)
        raise typer.Exit(1)
    configure_logging(Settings().log_format, "warning")
    results = asyncio.run(run_bench(image, calls, names))
    path = write_results(results, Path(out))
    typer.echo("CPU ms per call (" + f"load average {results['host']['loadavg_before'][0]:.2f}"
               + f" → {results['host']['loadavg_after'][0]:.2f})")
    typer.echo(table(results))
    typer.echo(f"results: {path}")
