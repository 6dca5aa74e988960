"""`navi doctor`'s probes on a real engine: a probe passes only if it exits 0, and the gVisor
probe sees threads work and the program's tasks bounded (``selfcheck.py``).

Red checks (see the report of this change): with ``_run_probe`` reading the report whatever
the exit status, the first test fails (the report of a probe that exits 2 was taken); at the
parent commit the gVisor probe's threads (EPERM from clone3) and RLIMIT_NPROC checks fail.
"""

from __future__ import annotations

import pytest

from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.docker.selfcheck import PROBE_LIMITS, Check, _probe_gvisor, _run_probe

pytestmark = pytest.mark.docker

def report_then_exit(status: int) -> str:
    return f"import json, sys; print(json.dumps({{'report': 1}})); sys.exit({status})"


@pytest.mark.parametrize("tier", ["runc", "gvisor"])
async def test_a_probe_that_exits_non_zero_after_its_report_fails(
    backend: DockerBackend, sandbox_image: str, tier: str
) -> None:
    limits = PROBE_LIMITS.model_copy(update={"runtime": tier})
    failed = await _run_probe(backend, sandbox_image, report_then_exit(2), limits)
    assert isinstance(failed, Check) and not failed.ok, failed
    assert failed.detail.startswith("exit 2")
    passed = await _run_probe(backend, sandbox_image, report_then_exit(0), limits)
    assert passed == {"report": 1}


async def test_the_gvisor_probe_sees_threads_and_bounded_tasks(
    backend: DockerBackend, sandbox_image: str
) -> None:
    checks = {c.name: c for c in await _probe_gvisor(backend, sandbox_image)}
    assert all(c.ok for c in checks.values()), [c for c in checks.values() if not c.ok]
    assert "gVisor: threads start and join (8)" in checks
    assert f"gVisor: tasks bounded (RLIMIT_NPROC {PROBE_LIMITS.pids})" in checks
