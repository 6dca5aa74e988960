"""A real `navi serve` process on loopback, with its own data dir and admin token; the fake
Ollama its agent tests talk to (`ollama`, one per module)."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.fakes.ollama import FakeOllama

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    url: str
    admin_token: str
    data_dir: Path
    process: subprocess.Popen[bytes]
    log_path: Path
    log_file: object = None
    instance_env: dict[str, str] = field(default_factory=dict)
    ended: str = ""  # how `stop_server` found it and how it ended

    def ending(self, lines: int = 40) -> str:
        """For an assertion's message: how the server ended and its log's last lines."""
        tail = "\n".join(self.log().splitlines()[-lines:])
        return f"server {self.ended}; its log ends:\n{tail}"

    def client(self, token: str | None = None, **kw: object) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60, **kw)  # type: ignore[arg-type]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tenant_with_user(self, name: str | None = None, role: str = "user") -> tuple[str, str]:
        """Create a tenant and a token of `role` in it; returns (tenant_id, token)."""
        with self.client(self.admin_token) as admin:
            tenant = admin.post("/v1/tenants", json={"name": name or f"t{secrets.token_hex(4)}"})
            tenant.raise_for_status()
            tenant_id = tenant.json()["id"]
            token = admin.post(f"/v1/tenants/{tenant_id}/tokens", json={"role": role})
            token.raise_for_status()
            return tenant_id, token.json()["token"]

    def token_for(self, tenant_id: str, role: str) -> str:
        with self.client(self.admin_token) as admin:
            resp = admin.post(f"/v1/tenants/{tenant_id}/tokens", json={"role": role})
            resp.raise_for_status()
            return str(resp.json()["token"])


def start_server(tmp: Path, policy: Path | None = None,
                 extra_env: dict[str, str] | None = None,
                 launcher: str = "runtime.cli", ready_s: float = 90) -> Server:
    """`launcher`: the module run as `python -m` (tests/fakes/faulty_serve injects faults);
    `ready_s`: how long it may take to answer /v1/healthz."""
    port = free_port()
    admin_token = "navi_admin_" + secrets.token_urlsafe(24)
    data_dir = tmp / "data"
    log_path = tmp / "server.log"
    # The suite makes hundreds of sessions whose 1 GiB disks hold a few bytes: let them
    # overcommit the data disk (tests/tenancy checks the strict default on a small disk).
    env = {**os.environ, "NAVI_ADMIN_TOKEN": admin_token, "NAVI_DATA_DIR": str(data_dir),
           "NAVI_LOG_FORMAT": "json", "NAVI_DISK_OVERCOMMIT": "1000", **(extra_env or {})}
    argv = [sys.executable, "-m", launcher, "serve", "--host", "127.0.0.1",
            "--port", str(port)]
    if policy is not None:
        argv += ["--policy", str(policy)]
    log_file = log_path.open("wb")
    process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log_file.close()
            raise RuntimeError(f"server exited: {log_path.read_text(errors='replace')}")
        try:
            if httpx.get(f"{url}/v1/healthz", timeout=1).status_code == 200:
                return Server(url, admin_token, data_dir, process, log_path, log_file)
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    process.kill()
    process.wait()
    log_file.close()
    raise RuntimeError(f"server did not come up: {log_path.read_text(errors='replace')}")


def stop_server(server: Server) -> None:
    """SIGTERM and wait; one that does not stop in 20 s gets SIGABRT (`navi serve` then
    writes every thread's stack to its log), then SIGKILL."""
    process, started = server.process, time.monotonic()
    if process.poll() is not None:
        server.ended = f"had exited by itself (status {process.returncode})"
    else:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
            server.ended = (f"stopped on SIGTERM in {time.monotonic() - started:.1f} s "
                            f"(status {process.returncode})")
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            server.ended = "did not stop on SIGTERM in 20 s (stacks in its log)"
    if server.log_file is not None:
        server.log_file.close()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def ollama() -> Iterator[FakeOllama]:
    with FakeOllama() as fake:
        yield fake  # type: ignore[misc]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("server"))
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def account(server: Server) -> tuple[str, str]:
    """A new tenant of the module's `server` and a user token of it: (tenant id, token)."""
    return server.tenant_with_user()


@pytest.fixture(scope="module")
def user(account: tuple[str, str]) -> str:
    return account[1]
