"""A kernel's container is confined like a call's: the tenant's uid (never root), no
capabilities, no new privileges, the project's seccomp filter, only `lo`, a read-only root,
no host namespace. Probed from inside a kernel through the API of a real `navi serve`, and
from outside through the engine (the container's own configuration)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import docker
import pytest

from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.docker

LIBC = "import ctypes, os, json; libc = ctypes.CDLL(None, use_errno=True)\n"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str, str]]:
    server = start_server(tmp_path_factory.mktemp("kernel-confinement"), ready_s=180)
    try:
        _, token = server.tenant_with_user()
        with server.client(token) as client:
            session = client.post("/v1/sessions", json={}).json()["id"]
        yield server, token, session
    finally:
        stop_server(server)


def probe(kernel: tuple[Server, str, str], code: str) -> Any:
    server, token, session = kernel
    with server.client(token) as client:
        resp = client.post(f"/v1/sessions/{session}/kernels/default/execute",
                           json={"code": LIBC + code}, timeout=120)
    out = resp.json()
    assert resp.status_code == 200 and out["ok"], out
    return json.loads(out["stdout"])


def test_kernel_cant_run_as_root(kernel: tuple[Server, str, str]) -> None:
    uid, euid, gid = probe(kernel, "print(json.dumps([os.getuid(), os.geteuid(), os.getgid()]))")
    assert uid == euid == gid and uid >= 1000


def test_kernel_cant_use_capabilities_or_gain_privileges(kernel: tuple[Server, str, str]
                                                          ) -> None:
    caps, nnp, seccomp = probe(kernel, (
        "fields = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)\n"
        "caps = {k: v.strip() for k, v in fields.items() if k.startswith('Cap')}\n"
        "print(json.dumps([caps, libc.prctl(39, 0, 0, 0, 0), fields['Seccomp'].strip()]))"))
    assert caps and set(caps.values()) == {"0000000000000000"}, caps
    assert nnp == 1 and seccomp == "2"


def test_kernel_cant_see_a_network_or_write_the_root(kernel: tuple[Server, str, str]) -> None:
    interfaces, root = probe(kernel, (
        "import errno\n"
        "try:\n    open('/etc/x', 'w'); root = 'written'\n"
        "except OSError as e:\n    root = errno.errorcode[e.errno]\n"
        "print(json.dumps([sorted(os.listdir('/sys/class/net')), root]))"))
    assert interfaces == ["lo"] and root == "EROFS"


def test_kernel_cant_unshare_or_ptrace(kernel: tuple[Server, str, str]) -> None:
    got = probe(kernel, (
        "u = libc.unshare(0x10000000); e1 = ctypes.get_errno()\n"
        "t = libc.ptrace(0, 0, None, None); e2 = ctypes.get_errno()\n"
        "print(json.dumps([u, e1, t, e2]))"))
    assert got == [-1, 1, -1, 1]


def test_kernel_container_is_configured_hardened(kernel: tuple[Server, str, str],
                                                 docker_api: docker.APIClient) -> None:
    _, _, session = kernel
    probe(kernel, "print(json.dumps(1))")  # it runs
    (found,) = docker_api.containers(filters={"label": f"navi.session={session}"})
    host = docker_api.inspect_container(found["Id"])["HostConfig"]
    assert host["NetworkMode"] == "none" and host["CapDrop"] == ["ALL"]
    assert host["ReadonlyRootfs"] is True and host["Privileged"] is False
    assert "no-new-privileges:true" in host["SecurityOpt"]
    assert host["PidMode"] == "" and host["IpcMode"] == "private"
    assert host["Memory"] > 0 and host["PidsLimit"] > 0
