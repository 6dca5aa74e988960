"""`navi bench cluster`: what the hop to a cluster node costs, and calls/s over 1, 2, 3 nodes.

Two measurements, both through the real HTTP API of real `navi serve` processes (runs as
root: it builds `navi cluster local` clusters, each node a network namespace with its own
Docker engine and Ray node, on this one machine):

- **hop**: warm `print(1)` (`code_exec`, one session, 0.5 s think time so a warm container
  is ready) on a server without a cluster and on one whose session lives on a cluster node,
  alternated call by call in the same rounds (same load); p50/p95 of each and the
  difference, the hop's cost (Ray actor call to the node agent and back, plus the result's
  object transfer). With `--kinds` (the default) the same for a user tool call and a kernel
  execute, on the same two servers (bench/cluster_kinds.py).
- **scale**: for N = 1, 2, 3 nodes, a fresh local cluster of N nodes and a server on it;
  2 sessions per node, one client per session calling back to back for `--seconds`;
  calls/s. On one machine the nodes share its cores, so this measures the control plane's
  and the engines' shared ceiling, not N machines (see bench/README.md).

Both servers use the same image for `code_exec` (`--image`, default tools-runner: it is small
enough to copy into every node's engine), so local and node run the same container; the
kinds' images (tools-runner, python for kernels) are copied to the node too.
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
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from bench.cluster_backup import backup_cost
from bench.cluster_kinds import KERNEL_IMAGE, KIND_IMAGES, PRINT, all_kinds
from bench.exec_api import LeanClient, _free_port, _until_up, stop_server
from runtime.config import PROJECT_ROOT, Settings

RESULTS = PROJECT_ROOT / "bench" / "results"


def _policy(tmp: Path, image: str) -> Path:
    """default.yaml with code_exec on `image`, kernels on the python image, and room for the
    bench's calls."""
    text = (PROJECT_ROOT / "policies" / "default.yaml").read_text()
    text = text.replace("execs_per_minute: 60", "execs_per_minute: 100000")
    text = text.replace("max_concurrent: 4", "max_concurrent: 16")
    text = text.replace("queue_depth: 8", "queue_depth: 64")
    text = text.replace("  code_exec: python\n",
                        f"  code_exec: {image}\n  kernel_exec: {KERNEL_IMAGE}\n")
    path = tmp / "policy.yaml"
    path.write_text(text)
    return path


class Server:
    def __init__(self, tmp: Path, image: str, cluster: Path | None, address: str | None):
        self.port = _free_port()
        self.admin = "navi_admin_" + secrets.token_urlsafe(24)
        data = tmp / "data"
        env = {**os.environ, "NAVI_ADMIN_TOKEN": self.admin, "NAVI_DATA_DIR": str(data),
               "NAVI_LOG_FORMAT": "json", "NAVI_WARM_POOL_SIZE": "1",
               "NAVI_DISK_OVERCOMMIT": "1000", "NAVI_CHANGE_BURST": "0"}
        env.pop("NAVI_CLUSTER", None)
        if cluster is not None and address is not None:
            (data / "keys").mkdir(parents=True, exist_ok=True)
            token = data / "keys" / "cluster-token"
            shutil.copyfile(cluster / "keys" / "cluster-token", token)
            token.chmod(0o600)
            env["NAVI_CLUSTER"] = address
        self.log = tmp / "server.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "runtime.cli", "serve", "--host", "127.0.0.1",
                 "--port", str(self.port), "--policy", str(_policy(tmp, image))],
                cwd=PROJECT_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = ""

    async def ready(self) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=60) as client:
            await _until_up(client, self.process, self.log)
            admin = {"Authorization": f"Bearer {self.admin}"}
            tenant = (await client.post("/v1/tenants", json={"name": "bench"},
                                        headers=admin)).json()["id"]
            user = await client.post(f"/v1/tenants/{tenant}/tokens", json={"role": "user"},
                                     headers=admin)
            self.token = user.json()["token"]

    async def session(self) -> tuple[str, str]:
        async with httpx.AsyncClient(base_url=self.url, timeout=60) as client:
            made = (await client.post("/v1/sessions", json={},
                                      headers={"Authorization": f"Bearer {self.token}"}))
            made.raise_for_status()
            return made.json()["id"], made.json()["node"]

    async def call(self, client: LeanClient, session: str) -> dict[str, Any]:
        status, body = await client.post(f"/v1/sessions/{session}/exec", PRINT, self.token)
        out = json.loads(body)
        if status != 200 or out.get("stdout") != "1\n":
            raise RuntimeError(f"exec failed: {status} {body[:300]!r}")
        return dict(out)


def _cluster(cmd: str, directory: Path, *extra: str) -> str:
    done = subprocess.run([sys.executable, "-m", "runtime.cli", "cluster", "local", cmd,
                           "--dir", str(directory), *extra], capture_output=True, text=True,
                          cwd=PROJECT_ROOT, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"navi cluster local {cmd}: {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1].removeprefix("NAVI_CLUSTER=") if done.stdout \
        else ""


@contextmanager
def local_cluster(tmp: Path, nodes: int, *images: str) -> Iterator[tuple[Path, str]]:
    directory = tmp / f"cluster{nodes}"
    refs = [f"{Settings().image_prefix}/{image}:latest" for image in dict.fromkeys(images)]
    address = _cluster("up", directory, "--nodes", str(nodes),
                       *(arg for ref in refs for arg in ("--image", ref)))
    try:
        yield directory, address
    finally:
        _cluster("down", directory)


@contextmanager
def serving(tmp: Path, image: str, cluster: Path | None = None,
            address: str | None = None) -> Iterator[Server]:
    tmp.mkdir(parents=True, exist_ok=True)
    server = Server(tmp, image, cluster, address)
    try:
        yield server
    finally:
        stop_server(server.process)


async def throughput(server: Server, sessions: int, seconds: float) -> dict[str, Any]:
    """One client per session, back to back, for `seconds`: calls/s over all of them."""
    await server.ready()
    made = [await server.session() for _ in range(sessions)]
    clients = [await LeanClient.connect(server.port) for _ in made]
    for client, (session, _node) in zip(clients, made, strict=True):
        await server.call(client, session)  # cold first calls outside the window
    done = [0] * len(made)
    deadline = time.perf_counter() + seconds

    async def loop(i: int) -> None:
        while time.perf_counter() < deadline:
            await server.call(clients[i], made[i][0])
            done[i] += 1

    started = time.perf_counter()
    try:
        await asyncio.gather(*(loop(i) for i in range(len(made))))
    finally:
        for client in clients:
            await client.close()
    took = time.perf_counter() - started
    return {"sessions": len(made), "nodes": sorted({n for _s, n in made}),
            "calls": sum(done), "seconds": round(took, 2),
            "calls_per_s": round(sum(done) / took, 2)}


def run(runs: int, seconds: float, max_nodes: int, image: str, backup: int = 0,
        backup_mib: int = 4, kinds: bool = True) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="navi-bench-cluster-"))
    results: dict[str, Any] = {"image": image, "runs": runs, "seconds": seconds,
                               "cpus": os.cpu_count(), "load_before": os.getloadavg()}
    try:
        with local_cluster(tmp, 1, image, *(KIND_IMAGES if kinds else ())) as (directory,
                                                                              address), \
                serving(tmp / "local", image) as local, \
                serving(tmp / "node", image, directory, address) as remote:
            results.update(asyncio.run(all_kinds(local, remote, runs, kinds)))
        with serving(tmp / "tp-local", image) as local:
            results["scale"] = {"local": asyncio.run(throughput(local, 2, seconds))}
        for n in range(1, max_nodes + 1):
            with local_cluster(tmp, n, image) as (directory, address), \
                    serving(tmp / f"tp-{n}", image, directory, address) as server:
                results["scale"][f"{n}_nodes"] = asyncio.run(
                    throughput(server, 2 * n, seconds))
                if backup and n == min(2, max_nodes):  # bench/cluster_backup.py
                    results["backup"] = backup_cost(server, tmp / f"tp-{n}" / "data",
                                                    address, backup, backup_mib)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["load_after"] = os.getloadavg()
    return results


def cli(
    runs: Annotated[int, typer.Option("--runs", min=4, help="Warm calls per side (hop).")] = 30,
    seconds: Annotated[float, typer.Option("--seconds", help="Seconds per calls/s run.")] = 20,
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=3, help="Up to N nodes.")] = 3,
    image: Annotated[str, typer.Option("--image", help="code_exec's image on both sides.")
                     ] = "tools-runner",
    backup: Annotated[int, typer.Option("--backup", min=0, help="Sessions on nodes for the "
                                        "navi backup figure (0: none).")] = 8,
    backup_mib: Annotated[int, typer.Option("--backup-mib", min=1, help="MiB each holds.")
                          ] = 4,
    kinds: Annotated[bool, typer.Option("--kinds/--no-kinds", help="Also a user tool call and "
                                        "a kernel execute, local vs node.")] = True,
) -> None:
    """The hop to a cluster node (warm print(1), local vs node; with --kinds also a user tool
    and a kernel execute), calls/s on 1..N nodes, and `navi backup` of sessions on nodes."""
    results = run(runs, seconds, nodes, image, backup, backup_mib, kinds)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"cluster-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    for name, what in (("hop", "warm print(1)"), ("user_tool", "user tool add"),
                       ("kernel", "kernel x = x + 1")):
        if name in results:
            h = results[name]
            typer.echo(f"{what} local p50 {h['local']['p50_ms']} ms, on node {h['node_id']} "
                       f"p50 {h['node']['p50_ms']} ms: hop {h['hop_p50_ms']:+} ms")
    for name, row in results["scale"].items():
        typer.echo(f"{name:8} {row['sessions']} sessions on {row['nodes']}: "
                   f"{row['calls_per_s']} calls/s")
    if "backup" in results:
        b = results["backup"]
        typer.echo(f"navi backup of {b['sessions']} node sessions ({b['mib_each']} MiB each): "
                   f"{b['images']} images, {b['stored_bytes']:,} bytes, disks "
                   f"{b['disks_seconds']} s, command {b['command_seconds']} s")
    typer.echo(f"results: {path}")
