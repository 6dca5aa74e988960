"""Egress through the per-execution proxy, in real containers (only loopback traffic).

The test runs an HTTP server on the host's 127.0.0.1; a container with an egress grant for
``localhost`` reaches it only through the proxy socket (the proxy may reach loopback because
these tests turn ``allow_loopback`` on, as ``NAVI_EGRESS_ALLOW_LOOPBACK`` would). Names that
must be refused are refused before any lookup; nothing else is ever contacted. The proxies
resolve through a fixed table (``localhost`` -> 127.0.0.1), never DNS, so even a run with a
protection switched off sends no query anywhere.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import docker
import pytest

from runtime.audit import AuditLog
from runtime.egress import EgressConfig
from runtime.executor import Executor, Invocation
from runtime.policy import Action, PolicyEngine, Subject, parse_policy
from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.models import ExecRequest, ExecResult, Limits
from tests.docker.sandbox_fixtures import sweep
from tests.fakes.resolver import LoopbackOnlyResolver

pytestmark = pytest.mark.docker


class Hits(BaseHTTPRequestHandler):
    hits: list[str]

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.hits.append(self.path)
        body = f"hello from the host {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def host_server() -> Iterator[tuple[int, list[str]]]:
    """An HTTP server on the host's loopback; yields (port, paths it was asked for)."""
    hits: list[str] = []
    handler = type("Handler", (Hits,), {"hits": hits})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], hits
    server.shutdown()
    server.server_close()



def make_backend(config: DockerBackendConfig, port: int, *, loopback: bool) -> DockerBackend:
    egress = EgressConfig(ports=(port,), allow_loopback=loopback)
    backend = DockerBackend(config.model_copy(update={"egress": egress}))
    backend.egress_resolver = LoopbackOnlyResolver()
    return backend


@pytest.fixture
async def egress_backend(
    backend_config: DockerBackendConfig, host_server: tuple[int, list[str]],
    docker_api: docker.APIClient, test_instance_id: str,
) -> AsyncIterator[DockerBackend]:
    backend = make_backend(backend_config, host_server[0], loopback=True)
    await backend.start()
    yield backend
    await backend.close()
    sweep(docker_api, test_instance_id)


async def run_in(backend: DockerBackend, image: str, code: str, *,
                 allow: list[str] | None = None) -> ExecResult:
    request = ExecRequest(
        image=image, argv=["python3", "-c", code], exec_id=f"t-{uuid.uuid4().hex[:12]}",
        session="egress", tenant="test", limits=Limits(timeout_s=30),
        network="egress" if allow else "none", egress_allowlist=allow or [],
    )
    return await backend.run(request)


def fetch(url: str) -> str:
    """Program text: fetch url with urllib (which honours HTTP_PROXY), print status + body."""
    return (
        "import json, urllib.request, urllib.error\n"
        f"try:\n    r = urllib.request.urlopen({url!r}, timeout=10)\n"
        "    print(json.dumps([r.status, r.read().decode()]))\n"
        "except urllib.error.HTTPError as e:\n"
        "    print(json.dumps([e.code, e.read().decode()]))\n"
    )


def answer(result: ExecResult) -> list:
    assert result.exit_code == 0, result.stderr.decode()
    return json.loads(result.stdout)


async def test_a_granted_program_reaches_an_allowed_host_through_the_proxy(
    egress_backend: DockerBackend, sandbox_image: str, host_server: tuple[int, list[str]]
) -> None:
    port, hits = host_server
    result = await run_in(egress_backend, sandbox_image,
                          fetch(f"http://localhost:{port}/plain"), allow=["localhost"])
    assert answer(result) == [200, "hello from the host /plain"]
    assert hits == ["/plain"]
    report = result.egress
    assert report is not None and report.allowed == 1 and report.refused == 0
    assert report.destinations[0].host == "localhost" and report.bytes_in > 0


async def test_https_style_connect_tunnels_through_the_proxy(
    egress_backend: DockerBackend, sandbox_image: str, host_server: tuple[int, list[str]]
) -> None:
    """What pip/curl do for https: CONNECT to the proxy, then their bytes in the tunnel."""
    port, hits = host_server
    code = (
        "import os, socket, json\n"
        "host, _, p = os.environ['HTTPS_PROXY'].rpartition(':')\n"
        "s = socket.create_connection((host.split('//')[1], int(p)), timeout=10)\n"
        f"s.sendall(b'CONNECT localhost:{port} HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n')\n"
        "status = s.recv(4096).decode().split('\\r\\n')[0]\n"
        "s.sendall(b'GET /tunnel HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n')\n"
        "data = b''\n"
        "while (c := s.recv(65536)): data += c\n"
        "print(json.dumps([status, data.decode().split('\\r\\n\\r\\n', 1)[1]]))\n"
    )
    result = await run_in(egress_backend, sandbox_image, code, allow=["localhost"])
    assert answer(result) == ["HTTP/1.1 200 Connection established",
                              "hello from the host /tunnel"]
    assert hits == ["/tunnel"]


async def test_a_name_not_on_the_allowlist_is_refused_without_a_lookup(
    egress_backend: DockerBackend, sandbox_image: str, host_server: tuple[int, list[str]]
) -> None:
    """Red when the allowlist check is skipped: the proxy then looks the name up (502)."""
    port, hits = host_server
    result = await run_in(egress_backend, sandbox_image,
                          fetch(f"http://not-allowed.invalid:{port}/x"), allow=["localhost"])
    status, body = answer(result)
    assert status == 403 and "not in the allowlist" in body
    report = result.egress
    assert report is not None and report.lookups == 0 and report.refused == 1
    assert isinstance(egress_backend.egress_resolver, LoopbackOnlyResolver)
    assert egress_backend.egress_resolver.calls == []
    assert report.allowed == 0 and hits == []


async def test_loopback_is_refused_when_the_test_setting_is_off(
    backend_config: DockerBackendConfig, sandbox_image: str, host_server: tuple[int, list[str]],
    docker_api: docker.APIClient, test_instance_id: str,
) -> None:
    """Production setting: `localhost` is allowlisted by name, but resolves to the host.
    Red when resolved addresses are not checked (the host server gets the request)."""
    port, hits = host_server
    backend = make_backend(backend_config, port, loopback=False)
    try:
        result = await run_in(backend, sandbox_image, fetch(f"http://localhost:{port}/host"),
                              allow=["localhost"])
    finally:
        await backend.close()
        sweep(docker_api, test_instance_id)
    status, body = answer(result)
    assert status == 403 and "loopback" in body and hits == []


PROBE = (
    "import json, os, socket\n"
    "def tcp(port):\n"
    "    s = socket.socket(); s.settimeout(3)\n"
    "    try: s.connect(('127.0.0.1', port)); return 'connected'\n"
    "    except OSError as e: return type(e).__name__\n"
    "def attempt(fn):\n"
    "    try: fn(); return 'done'\n"
    "    except OSError as e: return type(e).__name__\n"
    "sock = '/run/navi/egress.sock'\n"
    "mounts = [l.split() for l in open('/proc/self/mountinfo')]\n"
    "opts = [m[5] for m in mounts if m[4] == sock]\n"
    "print(json.dumps({\n"
    "  'net': sorted(os.listdir('/sys/class/net')),\n"
    "  'socket': os.path.exists(sock), 'proxy_env': os.environ.get('HTTPS_PROXY'),\n"
    "  'relay': tcp(3128), 'mount_opts': opts,\n"
    "  'write_dir': attempt(lambda: open('/run/navi/x', 'w')),\n"
    "  'unlink': attempt(lambda: os.unlink(sock)),\n"
    "  'chmod': attempt(lambda: os.chmod(sock, 0o777)),\n"
    "  'replace': attempt(lambda: os.rename('/tmp', sock)),\n"
    "  'dir_writable': os.access('/run/navi', os.W_OK),\n"
    "}))\n"
)


async def test_without_a_grant_there_is_no_socket_and_no_network(
    egress_backend: DockerBackend, sandbox_image: str
) -> None:
    out = answer(await run_in(egress_backend, sandbox_image, PROBE))
    assert out["net"] == ["lo"] and out["socket"] is False and out["proxy_env"] is None
    assert out["relay"] == "ConnectionRefusedError" and out["mount_opts"] == []


async def test_with_a_grant_the_socket_is_read_only_and_the_network_still_only_lo(
    egress_backend: DockerBackend, sandbox_image: str
) -> None:
    """Red when the socket is mounted read-write (its mount options lose `ro`)."""
    result = await run_in(egress_backend, sandbox_image, PROBE, allow=["localhost"])
    out = answer(result)
    assert out["net"] == ["lo"] and out["socket"] is True and out["relay"] == "connected"
    assert out["proxy_env"] == "http://127.0.0.1:3128"
    assert [o.split(",")[0] for o in out["mount_opts"]] == ["ro"]
    assert out["dir_writable"] is False
    for key in ("write_dir", "unlink", "chmod", "replace"):
        assert out[key] != "done", (key, out)


async def test_the_proxy_lives_only_as_long_as_the_call(
    egress_backend: DockerBackend, sandbox_image: str, sandbox_data_dir: Path
) -> None:
    started = time.monotonic()
    result = await run_in(egress_backend, sandbox_image, "print('ok')", allow=["localhost"])
    assert result.stdout == b"ok\n" and time.monotonic() - started < 20
    assert list((sandbox_data_dir / "egress").iterdir()) == []  # socket removed


POLICY = """
version: 1
images: {code_exec: python}
network: {egress_allowlist: [localhost]}
profiles:
  net:
    allow: [code_exec]
    tools:
      code_exec: {network: egress, egress: [localhost]}
tenants:
  "*": {profiles: [net]}
"""


async def test_the_executor_passes_the_grant_and_audits_what_egress_did(
    egress_backend: DockerBackend, sandbox_image: str, host_server: tuple[int, list[str]],
    tmp_path: Path,
) -> None:
    port, hits = host_server
    audit = AuditLog(tmp_path / "audit")
    await audit.open()
    try:
        executor = Executor(engine=PolicyEngine(parse_policy(POLICY)), backend=egress_backend,
                            audit=audit, resolve_image=lambda _: sandbox_image)
        code = (fetch(f"http://localhost:{port}/via-executor")
                + fetch(f"http://elsewhere.invalid:{port}/"))
        outcome = await executor.execute(
            Subject(tenant="t1", user="u", session="s1", profile="net"),
            Action(tool="code_exec", args={"language": "python", "code": code}),
            Invocation(argv=["python3", "-c", code]))
        records = await audit.records()
    finally:
        await audit.close()
    assert outcome.ok and hits == ["/via-executor"]
    intent, done = records[-2], records[-1]
    assert intent.limits is not None and intent.limits["egress"] == ["localhost"]
    assert done.kind == "outcome" and done.detail is not None
    assert f"allowed localhost:{port} x1" in done.detail
    assert f"refused elsewhere.invalid:{port} x1 (host not in the allowlist)" in done.detail
