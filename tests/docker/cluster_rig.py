"""A real local cluster for tests: `navi cluster local up|status|down` as processes.

Bringing a cluster up copies its image into every node's engine (≈ 30-60 s, ≈ 18 s down),
so the whole pytest run shares ONE 2-node cluster (`shared_local_cluster`, registered in
tests/conftest.py): up on the first test that needs it, down after the last one (or at the
end of the run). `module_cluster()` is each module's `cluster` fixture over it; before each
module it is checked and put right (a node whose Ray processes a test killed is started
again, an image the module asks for is loaded into the nodes' engines). A module that
changes the cluster beyond that (takes it down, kills engines) or needs other agents (the
security probes' agents without session disks) brings up its own with `own_cluster()`.
Ray drivers run in subprocesses, never `ray.init` in the test process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "navi/tools-runner:latest"  # small (≈150 MB): the copy into each engine stays short
SHARED_NODES = 2
SHARED_FIXTURE = "shared_local_cluster"


def navi(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtime.cli", "cluster", "local", *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )


def status(directory: Path) -> dict[str, Any]:
    done = navi("status", "--dir", str(directory))
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


class Cluster:
    def __init__(self, directory: Path, up: subprocess.CompletedProcess[str], took: float):
        self.dir = directory
        self.up = up
        self.up_s = took
        self.address = up.stdout.strip().splitlines()[-1].removeprefix("NAVI_CLUSTER=")
        self.state = json.loads((directory / "state.json").read_text())

    @property
    def token_file(self) -> Path:
        return Path(self.state["token_file"])

    def pids(self, node_id: str) -> dict[str, int]:
        node = next(n for n in status(self.dir)["nodes"] if n["id"] == node_id)
        return dict(node["pids"])


def bring_up(directory: Path, nodes: int, image: str) -> Cluster:
    t0 = time.monotonic()
    up = navi("up", "--nodes", str(nodes), "--dir", str(directory), "--image", image)
    took = time.monotonic() - t0
    assert up.returncode == 0, up.stderr
    print(f"\nlocal cluster up in {took:.1f} s:\n{up.stderr}")
    return Cluster(directory, up, took)


def own_cluster(nodes: int = 2, image: str = IMAGE) -> Callable[..., Iterator[Cluster]]:
    """A module-scoped `cluster` fixture: a cluster of the module's own, down at its end."""
    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
        made = bring_up(tmp_path_factory.mktemp("cluster") / "c", nodes, image)
        yield made
        navi("down", "--dir", str(made.dir))  # a no-op when a test took it down

    return cluster


def module_cluster(nodes: int = 2, image: str = IMAGE) -> Callable[..., Iterator[Cluster]]:
    """The module's `cluster` fixture: the run's shared cluster when it has `nodes` nodes
    (at most 2), with `image` loaded into its engines; its own one otherwise."""
    if nodes > SHARED_NODES:
        return own_cluster(nodes, image)

    def cluster(shared_local_cluster: SharedCluster) -> Cluster:
        return shared_local_cluster.ready(image)

    cluster.shares_the_run_cluster = True  # type: ignore[attr-defined]  # see uses_shared
    return pytest.fixture(scope="module")(cluster)


class SharedCluster:
    """The run's one cluster, brought up when first asked for (`ready`)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.cluster: Cluster | None = None
        self.images: set[str] = set()
        self.going_down: subprocess.Popen[bytes] | None = None

    def ready(self, image: str) -> Cluster:
        if self.cluster is not None and not self._put_right(self.cluster):
            self.close()
        self.wait_down()  # a new one goes in the same directory
        if self.cluster is None:
            self.cluster = bring_up(self.directory, SHARED_NODES, IMAGE)
            self.images = {IMAGE}
        if image not in self.images:
            self._load(self.cluster, image)
            self.images.add(image)
        return self.cluster

    @staticmethod
    def _put_right(cluster: Cluster) -> bool:
        """Start again the Ray processes of a node a test killed (its engine is up); False
        when that is not enough (the head or an engine is gone): make a new cluster."""
        from runtime.cluster import local

        seen: Any = local.status(cluster.dir)
        if seen is None or seen["head"]["state"] != "alive":
            return False
        for node in seen["nodes"]:
            if node["state"] == "alive":
                continue
            if not {"dockerd", "containerd"} <= set(node["pids"]):
                return False
            print(f"\nshared local cluster: starting {node['id']}'s Ray processes again")
            local.start_again(cluster.dir, node["id"])
        return True

    @staticmethod
    def _load(cluster: Cluster, image: str) -> None:
        from runtime.cluster.local import engines

        t0 = time.monotonic()
        tar = cluster.dir / "extra-image.tar"
        engines.save_images(engines.host_images([image]), tar)
        sockets = [Path(n["socket"]) for n in cluster.state["nodes"]]
        with ThreadPoolExecutor(len(sockets)) as pool:
            list(pool.map(lambda socket: engines.load_images(socket, tar), sockets))
        tar.unlink()
        print(f"\nshared local cluster: {image} loaded into its engines in "
              f"{time.monotonic() - t0:.1f} s")

    def close(self, wait: bool = True) -> None:
        """`navi down`; `wait=False`: the tests go on meanwhile (≈ 18 s, mostly waiting for
        the engines to stop), `wait_down` (at the latest at the end of the run) waits."""
        if self.cluster is not None:
            self.going_down = subprocess.Popen(
                [sys.executable, "-m", "runtime.cli", "cluster", "local", "down", "--dir",
                 str(self.cluster.dir)], cwd=ROOT, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.cluster = None
        if wait:
            self.wait_down()

    def wait_down(self) -> None:
        if self.going_down is not None:
            self.going_down.wait(timeout=300)
            self.going_down = None


@pytest.fixture(scope="session")
def shared_local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedCluster]:
    shared = SharedCluster(tmp_path_factory.mktemp("shared-cluster") / "c")
    SHARED.append(shared)
    yield shared
    shared.close()
    SHARED.remove(shared)


SHARED: list[SharedCluster] = []  # the run's (while its fixture is set up): for close_after


def uses_shared(item: pytest.Item) -> bool:
    """The test may use the shared cluster: it asks for it, or its module's `cluster`
    fixture is `module_cluster`'s over it (the conformance harness asks for `cluster` only
    when its adapter runs, so the fixtures it could ask for are what counts)."""
    if SHARED_FIXTURE in getattr(item, "fixturenames", ()):
        return True
    defs = item.session._fixturemanager.getfixturedefs("cluster", item)  # noqa: SLF001
    return bool(defs) and getattr(defs[-1].func, "shares_the_run_cluster", False)


_LAST_USER: dict[int, str | None] = {}  # id(session) -> nodeid of its last test using it


def close_after(item: pytest.Item) -> None:
    """After `item`'s teardown: take the shared cluster down when no test left needs it
    (its idle Ray and engine processes would load the 2 cores under the later tests)."""
    if not SHARED or SHARED[0].cluster is None:
        return
    session = item.session
    if id(session) not in _LAST_USER:
        users = [i.nodeid for i in session.items if uses_shared(i)]
        _LAST_USER[id(session)] = users[-1] if users else None
    if item.nodeid == _LAST_USER[id(session)]:
        SHARED[0].close(wait=False)
