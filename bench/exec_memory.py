"""Host memory held by one idle warm container (part of ``navi bench exec``).

Measured per container, cgroup v1 (this host): the memory cgroup's ``memory.usage_in_bytes``
(all pages charged to it: process memory + page cache + kernel memory), its ``memory.stat``
``total_rss``; and from /proc, the resident (VmRSS) and proportional (Pss, shared pages split
among their users) size of its processes (tini + the runner) and of its
``containerd-shim-runc-v2`` (one per container, outside the cgroup, host memory all the same).
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path
from typing import Any

MEMORY_ROOT = Path("/sys/fs/cgroup/memory")


def _memory_cgroup(init_pid: int) -> Path:
    """The container's memory cgroup, read from its init's /proc (under docker/ or its
    tenant's parent, /navi/<tenant>)."""
    for line in Path(f"/proc/{init_pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return MEMORY_ROOT / path.lstrip("/")
    raise RuntimeError(f"no memory cgroup for pid {init_pid} (cgroup v1 expected)")


def _kib(path: Path, field: str) -> int:
    """A ``Field:  N kB`` line of /proc/<pid>/status or smaps_rollup, in KiB (0: gone)."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _ppid(pid: int) -> int:
    return _kib(Path(f"/proc/{pid}/status"), "PPid")


def measure(container: str, init_pid: int) -> dict[str, float]:
    cgroup = _memory_cgroup(init_pid)
    usage = int((cgroup / "memory.usage_in_bytes").read_text())
    stat = dict(line.split() for line in (cgroup / "memory.stat").read_text().splitlines())
    pids = [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
    shim = _ppid(init_pid)
    mib = 1024.0

    def proc(pid: int, field: str) -> int:
        name = "smaps_rollup" if field == "Pss" else "status"
        return _kib(Path(f"/proc/{pid}/{name}"), field)

    return {
        "cgroup_usage_mib": round(usage / 2**20, 2),
        "cgroup_rss_mib": round(int(stat.get("total_rss", 0)) / 2**20, 2),
        "cgroup_cache_mib": round(int(stat.get("total_cache", 0)) / 2**20, 2),
        "processes": len(pids),
        "processes_rss_mib": round(sum(proc(p, "VmRSS") for p in pids) / mib, 2),
        "processes_pss_mib": round(sum(proc(p, "Pss") for p in pids) / mib, 2),
        "shim_rss_mib": round(proc(shim, "VmRSS") / mib, 2),
        "shim_pss_mib": round(proc(shim, "Pss") / mib, 2),
    }


async def idle_memory(paths: Any, count: int = 4) -> dict[str, Any]:
    """Make ``count`` sessions hold one idle warm container each, settle, measure them."""
    backend = paths.warm_backend
    sessions = [f"mem{i}" for i in range(count)]
    for session in sessions:
        await paths.call(backend, session)
    for session in sessions:
        await paths.warm_ready(session)
    await asyncio.sleep(2)  # let the runner's start-up settle
    samples = []
    for queue in list(backend.warm._ready.values()):
        for warm in list(queue):
            if warm.session not in sessions:
                continue
            state = await asyncio.to_thread(backend.api.inspect_container, warm.id)
            samples.append(await asyncio.to_thread(measure, warm.id, state["State"]["Pid"]))
    for session in sessions:
        await backend.release_session(session)
    keys = samples[0].keys() if samples else []
    return {
        "containers": len(samples),
        "median": {k: statistics.median(s[k] for s in samples) for k in keys},
        "samples": samples,
    }
