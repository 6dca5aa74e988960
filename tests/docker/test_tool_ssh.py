"""`ssh_exec` end to end: registry -> Executor -> a real `ssh`-image container -> a CONNECT
tunnel through the call's egress proxy -> an `sshd` this test runs on the host's 127.0.0.1
(a random port, its own host key and authorized_keys; ended by pid).

The proxies reach loopback as in test_tools_web.py (``allow_loopback`` and a resolver that
knows only ``localhost``). The key is a tenant secret (encrypted store): it must appear in no
result, audit record, event, server log or log line.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runtime.audit import AuditLog
from runtime.errors import PolicyDenied
from runtime.executor import Executor
from runtime.policy import PolicyEngine, Subject, parse_policy
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.docker.images import image_ref
from runtime.sandbox.models import OutputChunk
from runtime.store import Store
from runtime.store.secrets import SecretBox, SecretStore
from runtime.tools import ToolContext, ToolResult
from runtime.tools.builtin import SshExecTool
from runtime.tools.registry import ToolRegistry
from tests.docker.test_tools_web import web_backend  # noqa: F401
from tests.fakes.calls import call

pytestmark = pytest.mark.docker
SSHD = "/usr/sbin/sshd"


@dataclass
class Sshd:
    port: int
    host_key: str  # the public key, "ssh-ed25519 AAAA..."
    client_key: str  # the private key (the tenant's secret)
    log: Path


def _keygen(path: Path) -> tuple[str, str]:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path)],
                   check=True)
    public = path.with_suffix(".pub").read_text().split()
    return path.read_text(), f"{public[0]} {public[1]}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def web_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """The sshd (named so that `web_backend` allows its port through the proxy)."""
    if not Path(SSHD).exists() or shutil.which("ssh-keygen") is None:
        pytest.fail("openssh-server is not installed (scripts/setup.sh installs it with "
                    "NAVI_SETUP_TEST_TOOLS=1)")
    d = tmp_path_factory.mktemp("sshd")
    d.chmod(0o700)
    _, host_public = _keygen(d / "host")
    client_private, client_public = _keygen(d / "client")
    (d / "authorized_keys").write_text(client_public + "\n")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    port = _free_port()
    config = d / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPidFile {d / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "PermitRootLogin prohibit-password\nStrictModes no\nLogLevel VERBOSE\n"
        "AllowTcpForwarding no\nX11Forwarding no\nPermitTunnel no\n")
    log = d / "sshd.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)],
                                stdout=sink, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"sshd did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)
    yield Sshd(port, host_public, client_private, log)
    proc.terminate()
    proc.wait(timeout=10)


def policy(pinned: str) -> str:
    return f"""
version: 1
network: {{egress_allowlist: [localhost, elsewhere.invalid]}}
profiles:
  lab:
    allow: [group:remote]
    tools:
      ssh_exec:
        network: egress
        egress: [localhost]
        ssh: {{key_secret: lab_key, user: root, known_hosts: ["{pinned}"]}}
tenants:
  "*": {{profiles: [lab], default_profile: lab}}
"""


@dataclass
class Rig:
    registry: ToolRegistry
    executor: Executor
    audit: AuditLog
    tenant: str
    data: Path
    events: list[bytes]

    async def call(self, args: dict[str, Any]) -> ToolResult:
        subject = Subject(tenant=self.tenant, user="u", session="s1", profile="lab")

        async def on_output(chunk: OutputChunk) -> None:
            self.events.append(chunk.data)

        ctx = ToolContext(subject=subject, executor=self.executor, on_output=on_output)
        return await call(self.registry, "ssh_exec", args, ctx)


async def make_rig(tmp_path: Path, backend: DockerBackend, sshd: Sshd,
                   pinned: str) -> AsyncIterator[Rig]:
    data = tmp_path / "data"
    data.mkdir()
    store = await Store.open(data / "navi.sqlite3")
    tenant = await store.create_tenant("lab")
    secrets = SecretStore(store, SecretBox.in_data_dir(data))
    await secrets.set(tenant.id, "lab_key", sshd.client_key)
    audit = AuditLog(data)
    await audit.open()
    engine = PolicyEngine(parse_policy(policy(pinned)))
    executor = Executor(engine=engine, backend=backend, audit=audit,
                        resolve_image=image_ref, secrets=secrets)
    registry = ToolRegistry([SshExecTool()], policy=engine)
    try:
        yield Rig(registry, executor, audit, tenant.id, data, [])
    finally:
        await audit.close()
        await store.close()


@pytest.fixture
async def rig(tmp_path: Path, web_backend: DockerBackend,  # noqa: F811
              web_server: Sshd) -> AsyncIterator[Rig]:
    pinned = f"[localhost]:{web_server.port} {web_server.host_key}"
    async for r in make_rig(tmp_path, web_backend, web_server, pinned):
        yield r


def _key_lines(sshd: Sshd) -> list[str]:
    return [line for line in sshd.client_key.splitlines() if line and "-----" not in line]


def assert_key_nowhere(rig: Rig, sshd: Sshd, result: ToolResult, captured: str) -> None:
    shown = json.dumps(result.model_dump(mode="json"), default=str)
    events = b"".join(rig.events).decode("utf-8", "replace")
    server_log = sshd.log.read_text(errors="replace")
    for line in _key_lines(sshd):
        assert line not in shown, "the key is in the tool result"
        assert line not in events, "the key is in the events"
        assert line not in server_log, "the key is in the server log"
        assert line not in captured, "the key is in a log line"
        for path in rig.data.rglob("*"):
            if path.is_file() and path.name != "secrets.key":
                assert line.encode() not in path.read_bytes(), f"the key is in {path}"


async def test_a_command_runs_and_its_output_comes_back(
        rig: Rig, web_server: Sshd, capfd: pytest.CaptureFixture[str]) -> None:
    result = await rig.call({"host": f"localhost:{web_server.port}",
                             "command": "echo hello-$((6*7)); id -un"})
    out, err = capfd.readouterr()
    assert_key_nowhere(rig, web_server, result, out + err)
    assert result.success, result
    assert result.output == "hello-42\nroot\n"
    assert result.metadata["exit_code"] == 0 and result.metadata["host"] == "localhost"
    [intent] = await rig.audit.records(kind="intent")
    assert intent.secrets == ["lab_key"]
    assert "Accepted publickey for root" in web_server.log.read_text()


async def test_a_host_off_the_allowlist_is_refused_before_connecting(
        rig: Rig, web_server: Sshd) -> None:
    before = web_server.log.read_text()
    with pytest.raises(PolicyDenied) as denied:
        await rig.call({"host": f"elsewhere.invalid:{web_server.port}", "command": "true"})
    assert denied.value.rule == "profiles.lab.tools.ssh_exec.egress"
    assert [r.kind for r in await rig.audit.records()] == ["denied"]
    assert web_server.log.read_text() == before  # no connection reached sshd


async def test_a_changed_host_key_is_refused(
        tmp_path: Path, web_backend: DockerBackend, web_server: Sshd,  # noqa: F811
        capfd: pytest.CaptureFixture[str]) -> None:
    _, other = _keygen(tmp_path / "other")  # the key the policy pinned: not the server's
    pinned = f"[localhost]:{web_server.port} {other}"
    async for rig in make_rig(tmp_path, web_backend, web_server, pinned):
        result = await rig.call({"host": f"localhost:{web_server.port}",
                                 "command": "echo should-not-run"})
        assert not result.success
        assert result.metadata["ssh_error"] == "host_key_changed", result
        assert result.error is not None and "not the one the policy pins" in result.error
        assert "should-not-run" not in (result.output or "")
        assert "Accepted publickey" not in web_server.log.read_text()
        out, err = capfd.readouterr()
        assert_key_nowhere(rig, web_server, result, out + err)
