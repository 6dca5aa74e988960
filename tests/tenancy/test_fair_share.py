"""Fair share: one tenant running its maximum and flooding does not slow another tenant's
`print(1)` more than 3x (docs/security.md, "CPU and concurrency").

Tenant A runs CPU-burning calls at its `max_concurrent` (4) on this 2-core machine, with
its queue full and more refused (429, Retry-After); meanwhile tenant B's `print(1)` is
timed and compared with the same calls on the idle server (medians of 8 calls 0.3 s apart,
after a warm-up; the ratio, not absolute times, as the machine is shared and noisy). The
kernel shares CPU between tenants because each tenant's containers live in a cgroup of its
own (`/navi/<tenant>`, checked on A's containers while they burn). Measured here: 1.1-1.3
quiet, 1.5-1.8 while other jobs loaded the machine; without the tenant cgroups 1.6-1.8
quiet and 3.6 loaded; with neither the cgroups nor the limit (A's 12 at once) 3.4 (red).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import ROOT, Server, start_server, stop_server

pytestmark = pytest.mark.docker

POLICY = (ROOT / "policies" / "default.yaml").read_text().replace(
    "    queue_depth: 8 ", "    queue_depth: 4 ")
BURN = "import time\nend = time.time() + 15\nwhile time.time() < end:\n    pass\nprint('done')"
RATIO_MAX = 3.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    assert "    queue_depth: 4 " in POLICY
    tmp = tmp_path_factory.mktemp("fair-share")
    (tmp / "policy.yaml").write_text(POLICY)
    srv = start_server(tmp, tmp / "policy.yaml")
    yield srv
    stop_server(srv)


def session_of(client: httpx.Client) -> str:
    resp = client.post("/v1/sessions", json={})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def timed_prints(client: httpx.Client, session: str, n: int) -> list[float]:
    took = []
    for _ in range(n):
        started = time.monotonic()
        resp = client.post(f"/v1/sessions/{session}/exec", json={
            "tool": "code_exec", "args": {"language": "python", "code": "print(1)"}})
        took.append(time.monotonic() - started)
        assert resp.status_code == 200 and resp.json()["stdout"] == "1\n", resp.text
        time.sleep(0.3)  # an interactive caller's pace: the warm pool keeps up
    return took


def cgroup_parents(tenant: str) -> set[str]:
    """The cgroup parents of the tenant's containers (running or warm) on the engine."""
    ids = subprocess.run(["docker", "ps", "-q", "--filter", f"label=navi.tenant={tenant}"],
                         capture_output=True, text=True, check=True).stdout.split()
    if not ids:
        return set()
    out = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True,
                         check=True).stdout
    return {str(c["HostConfig"]["CgroupParent"]) for c in json.loads(out)}


def test_a_flooding_tenant_does_not_starve_another(server: Server, tmp_path: Path) -> None:
    a_tenant, a_token = server.tenant_with_user()
    _, b_token = server.tenant_with_user()
    with server.client(a_token) as a, server.client(b_token) as b:
        a_session, b_session = session_of(a), session_of(b)
        timed_prints(b, b_session, 3)  # warm-up
        idle = statistics.median(timed_prints(b, b_session, 8))
        statuses: list[tuple[int, str | None]] = []

        def burn() -> None:
            with server.client(a_token) as mine:  # 60 s: 15 s burning + 15 s queued
                resp = mine.post(f"/v1/sessions/{a_session}/exec", json={
                    "tool": "code_exec", "args": {"language": "python", "code": BURN}})
                statuses.append((resp.status_code, resp.headers.get("retry-after")))

        flood = [threading.Thread(target=burn) for _ in range(12)]
        for thread in flood:
            thread.start()
        time.sleep(3)  # A's four are burning, four wait, four were refused
        busy = statistics.median(timed_prints(b, b_session, 8))
        parents = cgroup_parents(a_tenant)
        for thread in flood:
            thread.join(120)
    ratio = busy / idle
    print(f"\nidle p50 {idle * 1000:.0f} ms, flooded p50 {busy * 1000:.0f} ms, ratio {ratio:.2f}")
    refused = [s for s in statuses if s[0] == 429]
    assert len(refused) == 4 and all(after == "1" for _, after in refused), statuses
    assert sum(1 for s in statuses if s[0] == 200) == 8, statuses  # 4 ran, 4 waited and ran
    assert ratio <= RATIO_MAX, (idle, busy)
    assert parents in ({f"/navi/{a_tenant}"}, {f"navi-{a_tenant.replace('-', '_')}.slice"}), \
        parents  # cgroupfs or systemd driver
