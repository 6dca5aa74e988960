"""`navi bench cluster --backup N`: what `navi backup` costs for N sessions on cluster nodes.

A server on a 2-node local cluster; N sessions (placement alternates them over both nodes),
each given `--backup-mib` MiB of random bytes through the API (random: nothing compresses
or dedups it); then `navi backup --json` with NAVI_CLUSTER set, as an operator runs it. Each
node agent copies its sessions' images consistently on its own disk and streams only their
data ranges (`runtime/backup_nodes.py`). Reported: the images copied, the bytes stored, the
disks' seconds (`backup.json` `disks.seconds`) and the whole command's seconds (Ray join,
databases, audit copy and verify included), bytes per second over the disks' part.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Protocol

import httpx

from runtime.config import PROJECT_ROOT


class Server(Protocol):
    """What this bench needs of the cluster bench's server (bench.cluster_bench.Server)."""

    url: str
    token: str

    async def ready(self) -> None: ...

    async def session(self) -> tuple[str, str]: ...


async def _fill(server: Server, sessions: int, mib: int) -> list[tuple[str, str]]:
    if not server.token:  # (the scale run before made its tenant already)
        await server.ready()
    made = [await server.session() for _ in range(sessions)]
    async with httpx.AsyncClient(base_url=server.url, timeout=300) as client:
        for session, _node in made:
            put = await client.put(f"/v1/sessions/{session}/files/bench/data.bin",
                                   content=os.urandom(mib * 1024 * 1024),
                                   headers={"Authorization": f"Bearer {server.token}"})
            put.raise_for_status()
    return made


def backup_cost(server: Server, data_dir: Path, address: str, sessions: int, mib: int
                ) -> dict[str, Any]:
    made = asyncio.run(_fill(server, sessions, mib))
    dest = data_dir.parent / "backup"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "runtime.cli", "backup", str(dest), "--json",
                           "--data-dir", str(data_dir)], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=1800, env={**env, "NAVI_CLUSTER": address})
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"navi backup: {done.stderr[-2000:]}")
    disks = json.loads(done.stdout.strip().splitlines()[-1])["disks"]
    shutil.rmtree(dest, ignore_errors=True)
    on_nodes = [d for d in disks["disks"] if d.get("node", "local") != "local"]
    stored = sum(d["stored"] for d in on_nodes)
    return {"sessions": len(made), "nodes": sorted({n for _s, n in made}),
            "mib_each": mib, "images": len(on_nodes), "stored_bytes": stored,
            "disks_seconds": disks["seconds"], "command_seconds": round(took, 2),
            "mib_per_s": round(stored / 2**20 / disks["seconds"], 1) if disks["seconds"]
            else None, "skipped": len(disks["skipped"])}
