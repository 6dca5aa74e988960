"""The tenant pool's class (``late_bind.pooled_template``): one class per tenant, uid, limits,
image and runtime, never a session's files, and gVisor kept out (its gofer does not see
mounts made after start)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.sandbox.docker.late_bind import PLACEHOLDER, Slot, is_template, pooled_template
from runtime.sandbox.docker.late_bind import slotted as slotted_spec
from runtime.sandbox.docker.spec import LABEL_SESSION, ContainerSpec, build_spec
from runtime.sandbox.docker.warm_pool import warm_key
from runtime.sandbox.models import ExecRequest, Limits


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for session in ("s1", "s2"):
        (tmp_path / "ws" / session / "workspace").mkdir(parents=True)
        (tmp_path / "ws" / session / "tmp").mkdir()
    return tmp_path / "ws"


def spec(root: Path, session: str, *, tenant: str = "t1", uid: int = 65534,
         engine_runtime: str = "runc", limits: Limits | None = None) -> ContainerSpec:
    request = ExecRequest(image="navi/python:latest", argv=["python3", "-I", "-c", "1"],
                          exec_id=f"e-{session}", session=session, tenant=tenant,
                          workspace=root / session / "workspace", tmp=root / session / "tmp",
                          limits=limits or Limits())
    return build_spec(request, image_id="sha256:abc", seccomp_profile='{"a":1}',
                      sandbox_uid=uid, instance_id="navi-test", lease_until=2_000_000_000,
                      workspaces_root=root, engine_runtime=engine_runtime)


def key(template: ContainerSpec | None) -> str:
    assert template is not None
    return warm_key(template)


def test_sessions_of_a_tenant_share_a_class_without_their_files(root: Path) -> None:
    one, two = (pooled_template(spec(root, s), "/workspace") for s in ("s1", "s2"))
    assert one is not None and two is not None
    assert key(one) == key(two)
    assert one.labels[LABEL_SESSION] == "" and is_template(one)
    late = {m.target: (m.source, m.propagation, m.read_only) for m in one.mounts}
    assert late == {"/workspace": (f"{PLACEHOLDER}/workspace", "rslave", False),
                    "/tmp": (f"{PLACEHOLDER}/tmp", "rslave", False)}
    assert str(root) not in one.model_dump_json()  # no session's path in the class


def test_a_class_is_per_tenant_uid_and_limits(root: Path) -> None:
    base = key(pooled_template(spec(root, "s1"), "/workspace"))
    assert key(pooled_template(spec(root, "s2", tenant="t2"), "/workspace")) != base
    assert key(pooled_template(spec(root, "s2", uid=70000), "/workspace")) != base
    assert key(pooled_template(spec(root, "s2", limits=Limits(memory_mb=1024)),
                               "/workspace")) != base


def test_gvisor_and_calls_without_a_workspace_keep_the_session_pool(root: Path) -> None:
    assert pooled_template(spec(root, "s1", engine_runtime="runsc"), "/workspace") is None
    assert pooled_template(spec(root, "s1"), "/elsewhere") is None


def test_a_slot_gives_each_container_its_own_sources_rslave(root: Path, tmp_path: Path) -> None:
    template = pooled_template(spec(root, "s1"), "/workspace")
    assert template is not None
    made = slotted_spec(template, Slot(tmp_path / "bind" / "abc"))
    mounts = {m["Target"]: m for m in made.host_config_kwargs()["mounts"]}
    assert mounts["/workspace"]["Source"] == str(tmp_path / "bind" / "abc" / "workspace")
    assert mounts["/tmp"]["Source"] == str(tmp_path / "bind" / "abc" / "tmp")
    assert mounts["/workspace"]["BindOptions"] == {"Propagation": "rslave"}
    assert not is_template(made)
    plain = spec(root, "s1").host_config_kwargs()["mounts"]  # the session pool: unchanged
    assert all("BindOptions" not in m for m in plain)
