"""A warm refill never binds a session disk that is being released (runtime.workspace.activity).

After a call the backend refills the session's warm pool in the background; the call's lease
is gone by then, so the refill can come while the idle release drops the warm containers and
before it unmounts the disk. A container made then would hold the released disk (its loop
device stays; after a restore, the old image). Red without ``may_launch``: a warm container
for the released session survives and the image's loop device stays."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from pathlib import Path

import docker
import pytest

from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.warm_pool import WarmPoolConfig
from runtime.sandbox.models import ExecRequest, Limits
from runtime.workspace import Workspaces
from runtime.workspace.activity import Activity, call_on_loop
from runtime.workspace.disk import SessionDisks
from tests.docker.sandbox_fixtures import sweep

pytestmark = pytest.mark.docker

MiB = 1024 * 1024


async def test_no_warm_refill_for_a_disk_being_released(
        tmp_path: Path, sandbox_image: str, docker_api: docker.APIClient) -> None:
    root = tmp_path / "workspaces"
    activity = Activity(idle_s=0.05)  # both ask it: made first, as runtime.nodes.machine does
    tenant, session = "t_00000000000000c1", "s_00000000000000c1"
    instance = f"navi-test-{uuid.uuid4().hex[:12]}"
    backend = DockerBackend(DockerBackendConfig(
        data_dir=tmp_path, workspaces_root=root, instance_id=instance,
        warm=WarmPoolConfig(size=1, idle_s=30)),
        may_launch=lambda t, s: activity.may_launch((t, s)))
    loop = asyncio.get_running_loop()
    settle = asyncio.Event()

    def drop(session_id: str) -> None:
        call_on_loop(loop, lambda: backend.release_session(session_id))
        loop.call_soon_threadsafe(settle.set)  # the call's refill comes now, before the unmount
        time.sleep(1.5)

    spaces = Workspaces(root, disks=SessionDisks(root, overcommit=1000.0),
                        activity=activity, drop_containers=drop)
    await backend.start()  # hardens the root (a bind mount of itself) before any disk, as serve
    try:
        path = spaces.create(tenant, session, uid=200000, disk_bytes=32 * MiB,
                             tenant_disk_bytes=64 * MiB)
        image = spaces.disks.image(spaces.session_dir(tenant, session))
        with spaces.open(tenant, session):  # the call's lease, as calls/service.py holds it
            result = await backend.run(ExecRequest(
                image=sandbox_image, argv=["sh", "-c", "echo ok > f; cat f"],
                exec_id=f"refill-{uuid.uuid4().hex[:8]}", session=session, tenant=tenant,
                workspace=path, uid=200000, limits=Limits(timeout_s=30)),
                settled=settle.wait())
        assert result.stdout == b"ok\n", result
        assert await asyncio.to_thread(spaces.release, tenant, session, only_idle=False)
        deadline = time.monotonic() + 20
        while any(launch.session == session for launches in backend.warm._launching.values()
                  for launch in launches) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        assert backend.warm.ready_count(session) == 0
        assert docker_api.containers(all=True, filters={"label": f"navi.session={session}"}) \
            == []
        deadline = time.monotonic() + 30  # the removed containers' mounts go with them
        while time.monotonic() < deadline and subprocess.run(
                ["losetup", "-j", str(image)], capture_output=True, text=True).stdout:
            await asyncio.sleep(0.1)
        assert subprocess.run(["losetup", "-j", str(image)], capture_output=True,
                              text=True).stdout == ""  # nothing holds the released disk
        with spaces.open(tenant, session) as ws:  # and it comes back with its file
            assert ws.read_bytes("f") == b"ok\n"
    finally:
        await backend.close()
        sweep(docker_api, instance)
        spaces.close()
        spaces.remove(tenant, session)
