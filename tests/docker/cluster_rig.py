"""A real local cluster for a test module: `navi cluster local up|status|down` as processes.

`module_cluster()` makes the module-scoped fixture (one cluster per module: `up` copies the
image into every node's engine, so it is made once). Ray drivers run in subprocesses, never
`ray.init` in the test process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "navi/tools-runner:latest"  # small (≈150 MB): the copy into each engine stays short


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


def module_cluster(nodes: int = 2, image: str = IMAGE) -> Callable[..., Iterator[Cluster]]:
    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
        directory = tmp_path_factory.mktemp("cluster") / "c"
        t0 = time.monotonic()
        up = navi("up", "--nodes", str(nodes), "--dir", str(directory), "--image", image)
        took = time.monotonic() - t0
        assert up.returncode == 0, up.stderr
        print(f"\nlocal cluster up in {took:.1f} s:\n{up.stderr}")
        yield Cluster(directory, up, took)
        navi("down", "--dir", str(directory))  # a no-op when a test took it down

    return cluster
