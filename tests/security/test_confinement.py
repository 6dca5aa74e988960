"""One adversarial ``test_cant_*`` per isolation promise of the sandbox (docs/sandbox.md).

Every probe runs on each adapter of the conformance harness that can CONFINE
(``tests/conformance/harness.py``): today DockerBackend under each runtime tier (runc, and
gVisor's runsc) in a cold container and in a warm one (``warm_pool.py``: created and started
ahead of the call, the job handed to its runner), which must all be confined alike, and the
node agent of a real 1-node local cluster (runc, through RemoteNode; its workspaces plain
directories, see conftest.py). A new backend gets these probes by its adapter, not by an edit
here. On the node two probes show less: the environment canary is set in this process, not
the agent's, and the host listeners are this host's, not the node engine's bridge.

Each runs hostile code in a real container and asserts the attempt fails for the reason the
protection gives (EROFS, not just EACCES; EPERM from seccomp, not EFAULT from a reachable
syscall). Each was shown to go red with its protection switched off (see the report of the
sandbox issue, and the note in each docstring).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from runtime.errors import InvalidInput
from runtime.sandbox.models import Limits, Mount
from tests.conformance.harness import CONFINE, Sandbox, adapter_params
from tests.docker.sandbox_fixtures import RunFn, py

pytestmark = pytest.mark.parametrize("adapter", adapter_params(CONFINE))


@pytest.fixture
def run(sandbox: Sandbox) -> RunFn:
    """A call in the adapter's sandbox (warm adapters assert the probe ran warm)."""
    return sandbox.run


@pytest.fixture
def tier(sandbox: Sandbox) -> str:
    """The runtime tier the adapter asks for (``limits.runtime``): each keeps every promise."""
    assert sandbox.caps.runtime is not None, "a confining adapter names its runtime tier"
    return sandbox.caps.runtime


@pytest.fixture
def workspace(sandbox: Sandbox) -> Path:
    """The sandbox's own workspace (not tests/docker's, which belongs to another backend)."""
    assert sandbox.workspace is not None, "a confining adapter mounts a workspace"
    return sandbox.workspace


LIBC = "import ctypes, os, json; libc = ctypes.CDLL(None, use_errno=True)\n"


async def probe(run: RunFn, code: str, **fields: Any) -> Any:
    """Run ``code`` (which prints one JSON document) in the sandbox and parse it."""
    result = await run(py(LIBC + code), limits=Limits(timeout_s=20), **fields)
    assert result.exit_code == 0, result.stderr.decode(errors="replace")
    return json.loads(result.stdout)


async def test_cant_run_as_root(run: RunFn) -> None:
    """Red with ``user`` unset (image default root)."""
    ids = await probe(
        run, "print(json.dumps([os.getuid(), os.geteuid(), os.getgid(), os.getgroups()]))"
    )
    uid, euid, gid, groups = ids
    assert uid == euid == gid == 65534
    assert 0 not in groups


async def test_runs_under_the_tier_asked(run: RunFn, tier: str) -> None:
    """gVisor's Sentry answers with its own kernel (4.4.0); runc's sandbox sees the host's:
    a call asked to run under gVisor never silently runs on runc."""
    kernel = await probe(run, "print(json.dumps(os.uname().release))")
    assert (kernel == "4.4.0") == (tier == "gvisor"), kernel
    assert (kernel == os.uname().release) == (tier == "runc"), kernel


async def test_cant_use_capabilities(run: RunFn) -> None:
    """Red without cap-drop ALL (the bounding set keeps Docker's default capabilities).
    gVisor's /proc shows no CapAmb; what it shows must be empty, and CAP_CHOWN must fail."""
    code = (
        "fields = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)\n"
        "caps = {k: v.strip() for k, v in fields.items() if k.startswith('Cap')}\n"
        "open('/tmp/c', 'w').close()\n"
        "r = libc.chown(b'/tmp/c', 0, 0)\n"
        "print(json.dumps([caps, r, ctypes.get_errno()]))"
    )
    caps, chown, chown_errno = await probe(run, code)
    assert {"CapPrm", "CapEff", "CapBnd"} <= set(caps)
    assert caps == {name: "0000000000000000" for name in caps}
    assert (chown, chown_errno) == (-1, 1)


async def test_cant_gain_new_privileges(run: RunFn) -> None:
    """Red without ``no-new-privileges`` (asked of the kernel: PR_GET_NO_NEW_PRIVS)."""
    code = "print(json.dumps(libc.prctl(39, 0, 0, 0, 0)))"
    assert await probe(run, code) == 1


async def test_cant_escape_the_seccomp_filter(run: RunFn) -> None:
    """Red unconfined (Seccomp 0, keyctl works) and with Docker's default profile
    (io_uring_setup reaches the kernel: EFAULT instead of EPERM)."""
    code = (
        "fields = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)\n"
        "keyctl = libc.syscall(250, 0, -3, 1); e1 = ctypes.get_errno()\n"
        "uring = libc.syscall(425, 1, 0); e2 = ctypes.get_errno()\n"
        "print(json.dumps([fields['Seccomp'].strip(), keyctl, e1, uring, e2]))"
    )
    mode, keyctl, keyctl_errno, uring, uring_errno = await probe(run, code)
    assert mode == "2"
    assert (keyctl, keyctl_errno) == (-1, 1), "keyctl must fail with EPERM"
    assert (uring, uring_errno) == (-1, 1), "io_uring_setup must fail with EPERM"


async def test_cant_ptrace(run: RunFn) -> None:
    """Red with Docker's default profile (it allows ptrace on kernels >= 4.8)."""
    code = "r = libc.ptrace(0, 0, None, None); print(json.dumps([r, ctypes.get_errno()]))"
    assert await probe(run, code) == [-1, 1]


async def test_cant_unshare_namespaces(run: RunFn) -> None:
    """Red unconfined: unprivileged user namespaces are enabled on this kernel."""
    code = "r = libc.unshare(0x10000000); print(json.dumps([r, ctypes.get_errno()]))"
    assert await probe(run, code) == [-1, 1]


async def test_cant_mount(run: RunFn) -> None:
    """Even via a fresh user namespace (which would grant CAP_SYS_ADMIN over it).
    Red unconfined: unshare + mount of a tmpfs succeed."""
    code = (
        "u = libc.unshare(0x10000000 | 0x00020000); e1 = ctypes.get_errno()\n"
        "m = libc.mount(b'none', b'/tmp', b'tmpfs', 0, None); e2 = ctypes.get_errno()\n"
        "print(json.dumps([u, e1, m, e2]))"
    )
    unshared, _, mounted, mount_errno = await probe(run, code)
    assert unshared == -1
    assert (mounted, mount_errno) == (-1, 1)


async def test_cant_write_the_root_filesystem(run: RunFn, tier: str) -> None:
    """EROFS, not merely EACCES: red without ``--read-only``. gVisor checks permissions
    first, so root-owned dirs answer EACCES there; world-writable /var/tmp is EROFS on both."""
    code = (
        "import errno\nout = {}\n"
        "for p in ['/etc/x', '/usr/x', '/x', '/var/tmp/x']:\n"
        "    try: open(p, 'w'); out[p] = 'written'\n"
        "    except OSError as e: out[p] = errno.errorcode[e.errno]\n"
        "root = [l.split() for l in open('/proc/self/mountinfo') if l.split()[4] == '/']\n"
        "out['root_opts'] = root[-1][5]\n"
        "print(json.dumps(out))"
    )
    out = await probe(run, code)
    assert out.pop("root_opts").split(",")[0] == "ro"
    assert out.pop("/var/tmp/x") == "EROFS"
    assert set(out.values()) <= ({"EROFS", "EACCES"} if tier == "gvisor" else {"EROFS"}), out


async def test_cant_see_a_network_interface_but_lo(run: RunFn) -> None:
    """Red with the default bridge network (eth0 appears)."""
    assert await probe(run, "print(json.dumps(sorted(os.listdir('/sys/class/net'))))") == ["lo"]


@pytest.fixture
def host_listeners(docker_api: docker.APIClient) -> Iterator[list[tuple[str, int]]]:
    """Listening sockets on the host's loopback and, when the engine has its default bridge
    up, on the bridge gateway (the address a container with a network would reach us on)."""
    ipam = docker_api.inspect_network("bridge")["IPAM"]["Config"][0]
    gateway = ipam.get("Gateway") or str(next(ipaddress.ip_network(ipam["Subnet"]).hosts()))
    sockets = []
    for address in ("127.0.0.1", gateway):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((address, 0))
        except OSError:  # no docker0 on this host right now: loopback only
            sock.close()
            continue
        sock.listen(8)
        sockets.append(sock)
    yield [s.getsockname() for s in sockets]
    for sock in sockets:
        sock.close()


async def test_cant_connect_to_the_host(run: RunFn, host_listeners: list[tuple[str, int]]) -> None:
    """Red with the bridge network: the gateway listener accepts the connection."""
    code = (
        f"targets = {host_listeners!r}\nimport socket\nout = []\n"
        "for host, port in targets:\n"
        "    s = socket.socket(); s.settimeout(2)\n"
        "    try: s.connect((host, port)); out.append('connected')\n"
        "    except OSError as e: out.append(type(e).__name__)\n"
        "print(json.dumps(out))"
    )
    assert "connected" not in await probe(run, code)


async def test_cant_reach_the_docker_socket(run: RunFn, workspace: Path) -> None:
    """Nothing of the host but the workspace; a socket can't be smuggled in as a mount.
    Red when ``_check_source`` stops refusing special files."""
    code = (
        "paths = ['/var/run/docker.sock', '/run/docker.sock']\n"
        "mounts = open('/proc/self/mountinfo').read()\n"
        "print(json.dumps([any(os.path.exists(p) for p in paths), 'docker.sock' in mounts]))"
    )
    assert await probe(run, code) == [False, False]
    sock = Path(os.path.realpath("/var/run/docker.sock"))
    with pytest.raises(InvalidInput, match="regular file or directory"):
        await run(["true"], mounts=[Mount(source=sock, target="/inputs/docker.sock")])


async def test_cant_read_the_supervisor_environment(
    run: RunFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red when the sandbox env is built from ``os.environ``."""
    canary = f"canary-{os.urandom(8).hex()}"
    monkeypatch.setenv("NAVI_TEST_CANARY", canary)
    code = (
        "blobs = [json.dumps(dict(os.environ))]\n"
        "for pid in os.listdir('/proc'):\n"
        "    try: blobs.append(open(f'/proc/{pid}/environ', 'rb').read().decode('latin-1'))\n"
        "    except (OSError, ValueError): pass\n"
        "print(json.dumps(blobs))"
    )
    blobs = await probe(run, code)
    assert len(blobs) >= 2, "found no process environment to inspect"
    assert not any(canary in blob for blob in blobs)


async def test_cant_setuid_to_root(run: RunFn, workspace: Path, tier: str) -> None:
    """A setuid-root binary planted in the workspace runs with our uid: the workspace is
    mounted nosuid and no-new-privileges ignores set-id bits. Red only with both off.
    (gVisor's mount table lists no per-mount flags: there the uid is the proof.)"""
    planted = workspace / "id"
    shutil.copy("/usr/bin/id", planted)
    os.chown(planted, 0, 0)
    planted.chmod(0o4755)
    code = (
        "import subprocess\n"
        "euid = subprocess.run(['./id', '-u'], capture_output=True, text=True).stdout.strip()\n"
        "ws = [l.split() for l in open('/proc/self/mountinfo') if l.split()[4] == '/workspace']\n"
        "print(json.dumps([euid, ws[-1][5].split(',')]))"
    )
    euid, options = await probe(run, code)
    assert euid == "65534"
    if tier == "runc":
        assert {"nosuid", "nodev"} <= set(options)
