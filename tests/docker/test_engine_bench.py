"""`navi bench engine` on a real engine, a few calls per path: every component is there, what
must cost CPU does, every call's container was counted start to end, and the totals are the
sums of their parts (the JSON and the printed table)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import docker
import pytest
from typer.testing import CliRunner

from bench.engine_bench import COMPONENTS, ENGINE
from runtime.commands.bench import app

pytestmark = pytest.mark.docker
CALLS = 3


@pytest.mark.parametrize("paths", [("cold", "warm"), ("gvisor_cold", "gvisor_warm")])
def test_bench_engine_accounts_every_component_of_each_path(
    tmp_path: Path, docker_api: docker.APIClient, paths: tuple[str, ...],
) -> None:
    if paths[0].startswith("gvisor") and "runsc" not in docker_api.info().get("Runtimes", {}):
        pytest.skip("gVisor (runsc) is not registered with this engine")
    done = CliRunner().invoke(app, ["engine", "--calls", str(CALLS), "--paths", ",".join(paths),
                                    "--out", str(tmp_path)])
    assert done.exit_code == 0, done.output
    [path] = tmp_path.glob("engine-*.json")
    result = json.loads(path.read_text())
    assert result["leftover_containers"] == 0
    assert set(result["paths"]) == set(paths)
    cores = os.cpu_count() or 1
    for name, row in result["paths"].items():
        ms = row["cpu_ms_per_call"]
        assert set(ms) == set(COMPONENTS), name
        for component in COMPONENTS:  # each does work for every call, none is free
            assert ms[component] > 0, (name, component, row)
        assert row["shims"] == {"started": CALLS, "exited": CALLS, "not_final": 0}, (name, row)
        engine = sum(ms[k] for k in ENGINE)
        assert row["engine_ms_per_call"] == pytest.approx(engine, abs=0.05), (name, row)
        total = engine + ms["container"] + ms["supervisor"]
        assert row["total_ms_per_call"] == pytest.approx(total, abs=0.05), (name, row)
        assert row["ceiling_calls_per_s"] == pytest.approx(cores * 1000 / total, abs=0.1)
        assert row["machine_busy_ms_per_call"] > 0
        assert f" {name} " in f" {done.output} "
        if name.endswith("warm"):
            assert row["served_warm"] == f"{CALLS}/{CALLS}"
