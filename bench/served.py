"""One `navi serve` for a bench that measures through the API: started on a free loopback
port with a data directory and an admin token of its own, waited for, a tenant user and a
session made, and stopped (the set-up the ports, processes, kernels and E2B benches share).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.exec_api import _free_port, stop_server
from runtime.config import PROJECT_ROOT


@dataclass
class Served:
    tmp: Path
    port: int
    admin_token: str
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """The server stopped (SIGTERM, then SIGKILL) and its directory removed."""
        stop_server(self.process)
        shutil.rmtree(self.tmp, ignore_errors=True)


def start(name: str, env: dict[str, str] | None = None, policy: str | None = None
          ) -> Served:
    """`navi serve` in `navi-bench-<name>-*` under the temp dir, logging JSON lines;
    ``policy``: the text of its policy file (default: the server's default policy)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"navi-bench-{name}-"))
    args: tuple[str, ...] = ()
    if policy is not None:
        (tmp / "policy.yaml").write_text(policy)
        args = ("--policy", str(tmp / "policy.yaml"))
    port, token = _free_port(), "navi_admin_" + secrets.token_urlsafe(24)
    full = {**os.environ, "NAVI_ADMIN_TOKEN": token, "NAVI_DATA_DIR": str(tmp / "data"),
            "NAVI_LOG_FORMAT": "json", **(env or {})}
    log_path = tmp / "server.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "runtime.cli", "serve", "--host", "127.0.0.1",
             "--port", str(port), *args], cwd=PROJECT_ROOT, env=full, stdout=log_file,
            stderr=subprocess.STDOUT)
    return Served(tmp, port, token, log_path, process)


async def until_up(client: httpx.AsyncClient, served: Served, within_s: float = 180) -> None:
    """The server answers (start-up takes long on a loaded machine)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if served.process.poll() is not None:
            log = served.log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"navi serve exited: {log}")
        try:
            if (await client.get("/v1/healthz", timeout=1)).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError("navi serve did not come up")


async def user_session(client: httpx.AsyncClient, served: Served) -> tuple[dict[str, str], str]:
    """A tenant `bench`, a user token of it (as headers) and a session of that user."""
    admin = {"Authorization": f"Bearer {served.admin_token}"}
    tenant = await client.post("/v1/tenants", json={"name": "bench"}, headers=admin)
    user = await client.post(f"/v1/tenants/{tenant.json()['id']}/tokens",
                             json={"role": "user"}, headers=admin)
    auth = {"Authorization": f"Bearer {user.json()['token']}"}
    session = (await client.post("/v1/sessions", json={}, headers=auth)).json()["id"]
    return auth, str(session)
