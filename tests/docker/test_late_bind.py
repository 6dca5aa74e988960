"""A tenant's pooled containers (``late_bind.py``): a new session's first call runs warm, and
a pooled container holds exactly one session's files in its life."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import pytest

from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.late_bind import BindRoot
from runtime.sandbox.docker.warm_pool import WarmContainer, WarmPoolConfig
from runtime.sandbox.models import ExecRequest, Limits
from tests.docker.sandbox_fixtures import SANDBOX_UID, started_backend
from tests.docker.warm_fixtures import gone, wait_ready

pytestmark = pytest.mark.docker

TENANT = "late-bind"
# what the job sees, and the container it runs in (the engine's hostname file is bound from
# /var/lib/docker/containers/<id>/hostname)
PROBE = """
import json, os
ids = [l.split()[3] for l in open('/proc/self/mountinfo') if l.split()[4] == '/etc/hostname']
print(json.dumps({'id': ids[0].split('/')[-2], 'cwd': os.getcwd(),
                  'workspace': sorted(os.listdir('.')), 'tmp': sorted(os.listdir('/tmp'))}))
"""


@pytest.fixture
async def pooled(backend_config: DockerBackendConfig, docker_api: docker.APIClient,
                 test_instance_id: str) -> AsyncIterator[DockerBackend]:
    config = backend_config.model_copy(
        update={"warm": WarmPoolConfig(size=1, idle_s=60, late_bind=True)})
    async with started_backend(config, docker_api, test_instance_id) as backend:
        assert backend.launcher.bind_root is not None, "the bind root did not open"
        yield backend


def session_dirs(root: Path, name: str) -> tuple[Path, Path]:
    """A session's workspace and tmp directory, each with a file named after the session."""
    workspace, tmp = root / name / "workspace", root / name / "tmp"
    for directory, file in ((workspace, f"{name}.ws"), (tmp, f"{name}.tmp")):
        directory.mkdir(parents=True)
        (directory / file).write_text(name)
        os.chown(directory, SANDBOX_UID, SANDBOX_UID)
    return workspace, tmp


async def call(backend: DockerBackend, image: str, session: str, workspace: Path, tmp: Path
               ) -> tuple[dict[str, object], bool]:
    taken = backend.warm.stats["taken"]
    request = ExecRequest(image=image, argv=["python3", "-I", "-c", PROBE],
                          exec_id=f"lb-{uuid.uuid4().hex[:10]}", session=session, tenant=TENANT,
                          workspace=workspace, tmp=tmp, limits=Limits(timeout_s=30))
    result = await backend.run(request)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout), backend.warm.stats["taken"] == taken + 1


def ready(backend: DockerBackend) -> WarmContainer:
    found = [c for q in backend.warm._ready.values() for c in q]  # noqa: SLF001
    assert len(found) == 1, found
    return found[0]


def seen_inside(api: docker.APIClient, container: str) -> dict[str, list[str]]:
    """What the container sees at /workspace and /tmp, read from the host through its root."""
    pid = api.inspect_container(container)["State"]["Pid"]
    return {name: sorted(os.listdir(f"/proc/{pid}/root/{name}")) for name in ("workspace", "tmp")}


def host_mounts_under(path: Path) -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        return [line.split()[4] for line in fh if line.split()[4].startswith(str(path))]


async def test_a_pooled_container_holds_exactly_one_sessions_files_in_its_life(
    pooled: DockerBackend, sandbox_image: str, docker_api: docker.APIClient, tmp_path: Path,
) -> None:
    root = pooled.config.workspaces_root / f"lb-{uuid.uuid4().hex[:8]}"
    first = session_dirs(root, "first")
    seen, warm = await call(pooled, sandbox_image, "first", *first)
    assert not warm  # the tenant's pool was empty: its first call ever is cold
    await wait_ready(pooled, f"@{TENANT}")

    waiting = ready(pooled)
    assert waiting.slot is not None
    assert seen_inside(docker_api, waiting.id) == {"workspace": [], "tmp": []}  # no session

    second = session_dirs(root, "second")
    seen, warm = await call(pooled, sandbox_image, "second", *second)
    assert warm, "a new session's first call did not run warm"
    assert seen == {"id": waiting.id, "cwd": "/workspace",
                    "workspace": ["second.ws"], "tmp": ["second.tmp"]}

    # used once, then removed with its slot: never back in the pool for another session
    assert await gone(docker_api, waiting.id)
    deadline = time.monotonic() + 10
    while waiting.slot.path.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not waiting.slot.path.exists()
    assert not host_mounts_under(waiting.slot.path)
    await wait_ready(pooled, f"@{TENANT}")
    refill = ready(pooled)
    assert refill.id != waiting.id
    assert seen_inside(docker_api, refill.id) == {"workspace": [], "tmp": []}

    third = session_dirs(root, "third")
    seen, warm = await call(pooled, sandbox_image, "third", *third)
    assert warm and seen["id"] == refill.id
    assert (seen["workspace"], seen["tmp"]) == (["third.ws"], ["third.tmp"])
    assert (second[0] / "second.ws").read_text() == "second"  # the session's files stay


async def test_a_bind_without_nosuid_nodev_is_refused_and_the_call_runs_cold(
    pooled: DockerBackend, sandbox_image: str, docker_api: docker.APIClient,
) -> None:
    """A session directory on a mount without nosuid,nodev never reaches a pooled container."""
    root = pooled.config.workspaces_root / f"lb-{uuid.uuid4().hex[:8]}"
    first = session_dirs(root, "first")
    await call(pooled, sandbox_image, "first", *first)
    await wait_ready(pooled, f"@{TENANT}")
    waiting = ready(pooled)
    plain = session_dirs(root, "plain")
    own = str(plain[0])  # a mount of its own, suid and dev allowed
    subprocess.run(["mount", "--bind", own, own], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,suid,dev", own], check=True)
        seen, warm = await call(pooled, sandbox_image, "plain", *plain)
    finally:
        subprocess.run(["umount", "-l", own], check=True)
    assert seen["workspace"] == ["plain.ws"]
    assert seen["id"] != waiting.id  # ran cold; the container it would have taken is gone
    assert pooled.warm.stats["bind_refused"] == 1
    assert await gone(docker_api, waiting.id)


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_a_mount_made_after_start_reaches_runc_not_gvisor(
    runtime: str, sandbox_image: str, tmp_path: Path, docker_api: docker.APIClient,
) -> None:
    """Why gVisor keeps the session pool: its gofer serves what it was given at start."""
    if runtime not in docker_api.info().get("Runtimes", {}):
        pytest.skip(f"the engine has no {runtime}")
    root = BindRoot(tmp_path)
    root.open()
    name = f"navi-test-latebind-{uuid.uuid4().hex[:8]}"
    try:
        slot = root.slot()
        session = tmp_path / "session"  # a disk of its own, nosuid,nodev as a session's is
        session.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "nosuid,nodev,size=1m", "tmpfs",
                        str(session)], check=True)
        (session / "seen").write_text("x")
        subprocess.run(["docker", "run", "-d", "--rm", "--name", name, "--runtime", runtime,
                        "--network", "none", "--mount", f"type=bind,source={slot.workspace},"
                        "target=/workspace,bind-propagation=rslave", sandbox_image,
                        "sleep", "60"], check=True, capture_output=True)
        BindRoot.attach(slot, session, None)
        listed = subprocess.run(["docker", "exec", name, "ls", "/workspace"],
                                capture_output=True, text=True, check=False)
        seen = listed.returncode == 0 and listed.stdout.split() == ["seen"]
        assert seen is (runtime == "runc"), listed
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
        root.close()
        subprocess.run(["umount", "-l", str(tmp_path / "session")], capture_output=True,
                       check=False)


async def test_idle_tenants_pools_shrink_back_within_the_hosts_budget(
    backend_config: DockerBackendConfig, docker_api: docker.APIClient, test_instance_id: str,
    sandbox_image: str,
) -> None:
    """Three new tenants' sessions ask for warm containers at once (``prefill``, as a
    session's create does): the host's ``total`` (2) bounds what exists on the engine at
    every moment, and an idle tenant's pool goes back to nothing after ``idle_s``."""
    config = backend_config.model_copy(update={"warm": WarmPoolConfig(
        size=1, burst=4, idle_s=4, per_tenant=2, total=2, late_bind=True)})
    async with started_backend(config, docker_api, test_instance_id) as backend:
        root = config.workspaces_root / f"lb-{uuid.uuid4().hex[:8]}"
        tenants = [f"lb-idle-{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]

        def pooled() -> list[dict]:
            found = docker_api.containers(all=True, filters={
                "label": f"navi.instance={test_instance_id}"})
            return [c for c in found if c["Labels"].get("navi.tenant") in tenants]

        asked = []
        for tenant in tenants:
            workspace, tmp = session_dirs(root, tenant)
            asked.append(await backend.prefill(ExecRequest(
                image=sandbox_image, argv=["python3", "-c", ""], workspace=workspace, tmp=tmp,
                exec_id=f"lb-{uuid.uuid4().hex[:10]}", session=f"s-{tenant}", tenant=tenant,
                limits=Limits(timeout_s=30))))
        assert asked == [True, True, True]
        most, deadline = 0, time.monotonic() + 20
        while backend.warm.ready_count() < 2 and time.monotonic() < deadline:
            most = max(most, len(pooled()))
            await asyncio.sleep(0.05)
        assert backend.warm.ready_count() == 2 and backend.warm._held.total() == 2  # noqa: SLF001
        most = max(most, len(pooled()))
        assert most <= 2, f"{most} warm containers, over the host's budget of 2"
        # nobody calls: every pool shrinks back to nothing, on the engine too
        deadline = time.monotonic() + 20
        while (pooled() or backend.warm.ready_count()) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert pooled() == [] and backend.warm.ready_count() == 0
        assert backend.warm.stats["expired"] == 2
        assert backend.warm._held.total() == 0  # noqa: SLF001
