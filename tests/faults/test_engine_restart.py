"""The Docker engine restarts under a running `navi serve`.

Only against a second engine this test starts itself (tests/faults/second_engine.py: its
own data root, exec root, pidfile, socket and bridge; never the main engine). A call is
running when the engine stops: it ends (not hangs), its intent gets its closing record;
while the engine is down calls are refused with 503 `engine_unavailable` and healthz still
answers; when the engine is back the same supervisor (not restarted) runs calls again by
itself, the audit verifies, and nothing of its instance is left on that engine at the end.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import httpx
import pytest

from runtime.workspace.mount_table import mounts_under
from tests.e2e.conftest import start_server, stop_server
from tests.faults.helpers import audit_of, instance_id, new_session, run, verify, wait_until
from tests.faults.second_engine import SecondEngine

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_engine_restart_under_a_running_server(tmp_path: Path) -> None:
    engine = SecondEngine(tmp_path)
    server = None
    try:
        engine.make_bridge()
        engine.start()
        engine.copy_image("navi/python:latest")
        # the session pool: the running call's container carries the session's label (a
        # tenant pool's container, started before the session, carries none)
        server = start_server(tmp_path, extra_env={"DOCKER_HOST": engine.host,
                                                   "NAVI_WARM_LATE_BIND": "false"})
        instance = instance_id(server.data_dir)
        tenant, token = server.tenant_with_user()
        with server.client(token) as client:
            session = new_session(client)
            first = run(client, session, "print(1)")
            assert first.status_code == 200 and first.json()["stdout"] == "1\n", first.text

            outcome: dict[str, httpx.Response] = {}
            runner = threading.Thread(target=lambda: outcome.setdefault("r", run(
                client, session, "import time\nprint('up', flush=True)\ntime.sleep(60)",
                timeout=90)), daemon=True)
            runner.start()
            assert wait_until(lambda: engine.docker(
                "ps", "-q", "--filter", f"label=navi.session={session}").stdout.strip(), 30)
            engine.stop()  # this engine only, by its own pid
            runner.join(60)
            assert not runner.is_alive(), "the running call hung when the engine stopped"
            assert outcome["r"].status_code in (200, 502, 503), outcome["r"].text

            down = run(client, session, "print(2)")
            assert down.status_code == 503, down.text
            assert down.json()["error"]["code"] == "engine_unavailable", down.text
            assert httpx.get(f"{server.url}/v1/healthz", timeout=1).status_code == 200

            engine.start()

            def works() -> bool:
                resp = run(client, session, "print(3)")
                return resp.status_code == 200 and resp.json()["stdout"] == "3\n"
            assert wait_until(works, 30, step=1.0)
            records = audit_of(server, tenant=tenant, session=session)
            intents = {r["exec_id"] for r in records if r["kind"] == "intent"}
            closed = {r["exec_id"] for r in records if r["kind"] in ("outcome", "interrupted")}
            assert intents <= closed, records
        assert verify(server)["ok"] is True
        stop_server(server)
        left = engine.docker("ps", "-aq", "--filter", f"label=navi.instance={instance}"
                             ).stdout.split()
        # What a stop leaves on the engine (a container stopped but not yet removed) goes
        # at the next start of the same instance.
        (tmp_path / "again").mkdir()
        server = start_server(tmp_path / "again", extra_env={
            "DOCKER_HOST": engine.host, "NAVI_DATA_DIR": str(tmp_path / "data")})
        assert wait_until(lambda: not set(left) & set(engine.docker(
            "ps", "-aq", "--filter", f"label=navi.instance={instance}").stdout.split()), 30)
    finally:
        if server is not None:
            stop_server(server)
        engine.close()
        for point in sorted(mounts_under(tmp_path), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], check=False)
