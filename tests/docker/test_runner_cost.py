"""`python -m bench.runner_cost`: the warm runner of this checkout runs its job in a hardened
container (Landlock check passed, trailer read) and the three figures come back."""

from __future__ import annotations

import pytest

from bench.runner_cost import measure

pytestmark = pytest.mark.docker


def test_runner_cost_measures_the_runner_in_a_hardened_container() -> None:
    got = measure(runs=3, runtime="runc", image="navi/python:latest")
    assert set(got) == {"runner_cpu_ms", "ready_p50_ms", "call_p50_ms"}
    assert all(value > 0 for value in got.values())
    assert got["call_p50_ms"] < got["ready_p50_ms"] + 1000
