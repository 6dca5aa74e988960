"""Self-hosting with docker-compose: the file validates (`docker-compose config`), only the
supervisor gets the engine socket, and `docker-compose up` for real serves the API and the web
client and runs a sandbox from inside the supervisor container."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.e2e.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
SOCKET = "/var/run/docker.sock"


def compose_bin() -> str:
    found = shutil.which("docker-compose")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but docker-compose is missing (apt-get install docker-compose)")
        pytest.skip("docker-compose is not installed")
    return found


def compose(*args: str, env: dict[str, str], timeout: float = 120,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([compose_bin(), "-f", str(ROOT / "docker-compose.yml"), *args],
                          cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"docker-compose {' '.join(args)} failed:\n{done.stderr}")
    return done


def test_config_is_valid_and_only_the_supervisor_gets_the_socket(tmp_path: Path) -> None:
    env = {"NAVI_ADMIN_TOKEN": "t" * 32, "NAVI_DATA_ROOT": str(tmp_path)}
    config = yaml.safe_load(compose("config", env=env).stdout)
    navi = config["services"]["navi"]
    assert "/v1/healthz" in " ".join(navi["healthcheck"]["test"])
    assert navi["environment"]["NAVI_DATA_DIR"] == str(tmp_path)
    assert navi["build"]["network"] == "none"
    # The data dir is a named volume mounted at the same path as on the host.
    assert f"navi-data:{tmp_path}:rw" in navi["volumes"]
    assert config["volumes"]["navi-data"]["driver_opts"]["device"] == str(tmp_path)
    assert f"{SOCKET}:{SOCKET}:rw" in navi["volumes"]
    # host uids are the host's: its passwd, read-only, is what the supervisor checks
    assert "/etc/passwd:/host/etc/passwd:ro" in navi["volumes"]
    assert navi["environment"]["NAVI_HOST_PASSWD"] == "/host/etc/passwd"
    assert all(p.startswith("127.0.0.1:") for p in navi["ports"])  # loopback by default
    ollama = config["services"]["ollama"]
    assert ollama["profiles"] == ["ollama"]  # optional
    for name, service in config["services"].items():
        if name != "navi":
            assert not any("docker.sock" in str(v) for v in service.get("volumes", [])), name
            assert not service.get("privileged")


def test_config_refuses_without_an_admin_token() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NAVI_ADMIN_TOKEN"}
    done = subprocess.run([compose_bin(), "-f", str(ROOT / "docker-compose.yml"), "config"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode != 0
    assert "set NAVI_ADMIN_TOKEN" in done.stderr


@pytest.fixture
def data_root(tmp_path: Path) -> Iterator[Path]:
    """A host data dir made nosuid,nodev, as docker-compose.yml asks the host to do."""
    if os.geteuid() != 0:
        pytest.skip("making the data dir nosuid,nodev needs root")
    root = tmp_path / "navi-data"
    root.mkdir()
    root.chmod(0o755)
    subprocess.run(["mount", "--bind", str(root), str(root)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,nosuid,nodev", str(root)], check=True)
        yield root
    finally:
        subprocess.run(["umount", "--lazy", str(root)], check=False)


@pytest.mark.docker
@pytest.mark.slow
def test_compose_up_serves_and_runs_sandboxes(data_root: Path) -> None:
    compose_bin()
    built = subprocess.run(["bash", str(ROOT / "scripts" / "supervisor_image.sh")], cwd=ROOT,
                           capture_output=True, text=True, timeout=900, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    port = free_port()
    admin = "navi_admin_" + secrets.token_urlsafe(24)
    project = f"navitest{secrets.token_hex(4)}"
    # The host's passwd as the supervisor container sees it: here one with an account at
    # the first sandbox uid, which the tenant's uid must skip (the container's own has none)
    host_passwd = data_root.parent / "host-passwd"
    host_passwd.write_text(Path("/etc/passwd").read_text()
                           + "hostuser:x:200000:200000::/home/hostuser:/bin/sh\n")
    env = {"NAVI_ADMIN_TOKEN": admin, "NAVI_DATA_ROOT": str(data_root),
           "NAVI_PORT": str(port), "NAVI_HOST_PASSWD_FILE": str(host_passwd)}
    url = f"http://127.0.0.1:{port}"
    try:
        compose("-p", project, "up", "-d", "--no-build", "navi", env=env)
        _wait_healthy(project, url)
        with httpx.Client(base_url=url, timeout=60,
                          headers={"Authorization": f"Bearer {admin}"}) as api:
            tenant = api.post("/v1/tenants", json={"name": "compose"}).json()["id"]
            token = api.post(f"/v1/tenants/{tenant}/tokens", json={"role": "user"}).json()
            api.headers["Authorization"] = f"Bearer {token['token']}"
            session = api.post("/v1/sessions", json={}).json()["id"]
            assert api.put(f"/v1/sessions/{session}/files/in.txt",
                           content=b"from the host").status_code == 201
            code = ("import os\nprint(open('in.txt').read(), os.getuid(),"
                    f" os.path.exists({SOCKET!r}))\nopen('out.txt', 'w').write('made')")
            result = api.post(f"/v1/sessions/{session}/exec", json={
                "tool": "code_exec", "args": {"language": "python", "code": code}}).json()
            assert result["ok"] is True, result
            text, uid, socket_seen = result["stdout"].rsplit(" ", 2)
            assert (text, socket_seen) == ("from the host", "False\n")  # no engine socket
            assert int(uid) > 200000  # the tenant's own, past the host account at 200000
            assert api.get(f"/v1/sessions/{session}/files/out.txt").content == b"made"
        page = httpx.get(url + "/")
        assert page.status_code == 200 and "Navi Runtime" in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
    finally:
        logs = compose("-p", project, "logs", "--no-color", "navi", env=env, check=False)
        compose("-p", project, "down", "-v", "--remove-orphans", env=env, check=False)
    assert "Traceback" not in logs.stdout, logs.stdout[-3000:]


def _wait_healthy(project: str, url: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        status = subprocess.run(
            ["docker", "ps", "--filter", f"label=com.docker.compose.project={project}",
             "--format", "{{.Status}}"], capture_output=True, text=True, check=False).stdout
        if "(healthy)" in status:
            assert httpx.get(url + "/v1/healthz", timeout=5).json()["status"] == "ok"
            return
        time.sleep(1)
    raise AssertionError(f"the supervisor did not become healthy: {status!r}")
