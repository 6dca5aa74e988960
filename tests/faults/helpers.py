"""What the fault tests share: a small loop-mounted filesystem, and looks at an instance's
containers, mounts and audit from outside the server."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from runtime.workspace.mount_table import mounts_under
from tests.e2e.conftest import Server


@contextlib.contextmanager
def small_filesystem(tmp: Path, size_mib: int = 128) -> Iterator[Path]:
    """An ext4 image of `size_mib` loop-mounted at tmp/mnt (errors=remount-ro, like a
    production data disk); unmounted (and what is mounted below it) in any case."""
    image, mnt = tmp / "disk.img", tmp / "mnt"
    mnt.mkdir()
    subprocess.run(["truncate", "-s", f"{size_mib}M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop,errors=remount-ro", str(image), str(mnt)], check=True)
    try:
        yield mnt
    finally:
        for point in sorted(mounts_under(mnt), key=len, reverse=True):  # mnt comes last
            subprocess.run(["umount", "-l", point], check=False)


def loop_device(mnt: Path) -> str:
    """The loop device (e.g. loop7) mounted at `mnt`."""
    source = subprocess.run(["findmnt", "-n", "-o", "SOURCE", str(mnt)], check=True,
                            capture_output=True, text=True).stdout.strip()
    return Path(source).name


def instance_id(data_dir: Path) -> str:
    return (data_dir / "instance_id").read_text().strip()


def containers_of(instance: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=navi.instance={instance}"],
                         check=True, capture_output=True, text=True).stdout
    return out.split()


def wait_until(check: object, timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(step)
    return bool(check())  # type: ignore[operator]


def verify(server: Server) -> dict:
    with server.client(server.admin_token) as admin:
        resp = admin.get("/v1/audit/verify")
        resp.raise_for_status()
        return dict(resp.json())


def audit_of(server: Server, **params: str) -> list[dict]:
    with server.client(server.admin_token) as admin:
        resp = admin.get("/v1/audit", params={"limit": "1000", **params})
        resp.raise_for_status()
        return list(resp.json())


def new_session(client: httpx.Client) -> str:
    resp = client.post("/v1/sessions", json={})
    resp.raise_for_status()
    return str(resp.json()["id"])


def run(client: httpx.Client, session: str, code: str, timeout: float = 60) -> httpx.Response:
    return client.post(f"/v1/sessions/{session}/exec", timeout=timeout,
                       json={"tool": "code_exec", "args": {"language": "python", "code": code}})
