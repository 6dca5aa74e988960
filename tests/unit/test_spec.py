"""ContainerSpec: secure defaults, insecure values unrepresentable, request validation."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from pydantic import ValidationError

from runtime.errors import InvalidInput
from runtime.sandbox.docker.spec import ContainerSpec, build_spec
from runtime.sandbox.models import ExecRequest, Limits, Mount

PROFILE = '{"defaultAction":"SCMP_ACT_ERRNO"}'


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "ws" / "s1").mkdir(parents=True)
    return tmp_path / "ws"


def spec_for(root: Path, **fields: object) -> ContainerSpec:
    request = ExecRequest(
        **{"image": "navi/python:latest", "argv": ["python3", "-c", "1"], "exec_id": "e1", **fields}
    )
    return build_spec(
        request,
        image_id="sha256:abc",
        seccomp_profile=PROFILE,
        sandbox_uid=65534,
        instance_id="navi-test-1234",
        lease_until=2_000_000_000,
        workspaces_root=root,
    )


def test_defaults_are_the_hardened_ones(root: Path) -> None:
    spec = spec_for(root, workspace=root / "s1", limits=Limits(memory_mb=256, pids=64, cpus=0.5))
    host = spec.host_config_kwargs()
    assert host["network_mode"] == "none" and host["privileged"] is False
    assert host["cap_drop"] == ["ALL"] and "cap_add" not in host
    assert host["security_opt"] == [f"seccomp={PROFILE}", "no-new-privileges:true"]
    assert host["read_only"] is True and host["init"] is True
    assert host["ipc_mode"] == "private" and host["cgroupns"] == "private"
    assert host["tmpfs"] == {"/tmp": f"rw,noexec,nosuid,nodev,size={64 * 1024 * 1024}"}
    assert host["mem_limit"] == host["memswap_limit"] == 256 * 1024 * 1024
    assert host["pids_limit"] == 64 and host["nano_cpus"] == 500_000_000
    assert {u["Name"]: (u["Soft"], u["Hard"]) for u in host["ulimits"]}["core"] == (0, 0)
    assert host["log_config"]["Type"] == "none"
    assert [(m["Source"], m["Target"], m["ReadOnly"]) for m in host["mounts"]] == [
        (str(root / "s1"), "/workspace", False)
    ]
    create = spec.create_kwargs(host)
    assert create["user"] == "65534:65534" and create["working_dir"] == "/workspace"
    assert create["use_config_proxy"] is False and create["network_disabled"] is True
    assert create["environment"] == [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME=/tmp",
        "LANG=C.UTF-8",
    ]
    assert spec.labels == {
        "navi.exec_id": "e1",
        "navi.tenant": "local",
        "navi.session": "local",
        "navi.lease_until": "2000000000",
        "navi.instance": "navi-test-1234",
    }


@pytest.mark.parametrize(
    "field, value",
    [
        ("privileged", True),
        ("network_mode", "bridge"),
        ("cap_drop", ()),
        ("no_new_privileges", False),
        ("read_only_root", False),
        ("init", False),
        ("ipc_mode", "host"),
        ("log_driver", "json-file"),
        ("user", "0:0"),
        ("user", "root"),
    ],
)
def test_insecure_values_cannot_be_constructed(root: Path, field: str, value: object) -> None:
    spec = spec_for(root)
    with pytest.raises(ValidationError):
        ContainerSpec(**{**spec.model_dump(), field: value})


def test_spec_is_frozen(root: Path) -> None:
    spec = spec_for(root)
    with pytest.raises(ValidationError):
        spec.privileged = True  # type: ignore[misc]


def test_supervisor_environment_never_reaches_the_spec(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAVI_SECRET_CANARY", "leak")
    spec = spec_for(root, env={"FOO": "bar"})
    assert spec.env == {
        "FOO": "bar",
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
    }


@pytest.mark.parametrize(
    "env", [{"HOME": "/root"}, {"PATH": "/x"}, {"BAD-NAME": "1"}, {"1X": "1"}, {"A": "x\x00y"}]
)
def test_bad_env_is_refused(root: Path, env: dict[str, str]) -> None:
    with pytest.raises(InvalidInput):
        spec_for(root, env=env)


def test_oversized_env_is_refused(root: Path) -> None:
    with pytest.raises(InvalidInput, match="larger"):
        spec_for(root, env={f"V{i}": "x" * 1000 for i in range(100)})


def test_workspace_must_live_below_the_workspaces_root(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    with pytest.raises(InvalidInput, match="below the workspaces root"):
        spec_for(root, workspace=outside)
    with pytest.raises(InvalidInput, match="below the workspaces root"):
        spec_for(root, workspace=root)


def test_symlinked_workspace_is_refused(root: Path, tmp_path: Path) -> None:
    (root / "link").symlink_to(tmp_path)
    with pytest.raises(InvalidInput, match="symlink"):
        spec_for(root, workspace=root / "link")


def test_extra_mounts_are_read_only_files_or_dirs_at_safe_targets(
    root: Path, tmp_path: Path
) -> None:
    data = tmp_path / "input.txt"
    data.write_text("x")
    spec = spec_for(root, mounts=[Mount(source=data, target="/inputs/input.txt")])
    assert [(m.target, m.read_only) for m in spec.mounts] == [("/inputs/input.txt", True)]
    bad_mounts = [
        Mount(source=data, target="/inputs/x", read_only=False),
        Mount(source=data, target="/proc/x"),
        Mount(source=data, target="/etc/passwd"),
        Mount(source=data, target="relative"),
        Mount(source=data, target="/inputs/../etc"),
        Mount(source=Path("relative"), target="/inputs/x"),
        Mount(source=tmp_path / "missing", target="/inputs/x"),
    ]
    for mount in bad_mounts:
        with pytest.raises(InvalidInput):
            spec_for(root, mounts=[mount])


def test_mount_of_a_socket_is_refused(root: Path, tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        with pytest.raises(InvalidInput, match="regular file or directory"):
            spec_for(root, mounts=[Mount(source=path, target="/inputs/s.sock")])


def test_mount_may_not_shadow_the_workspace(root: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="overlaps"):
        spec_for(
            root,
            workspace=root / "s1",
            mounts=[Mount(source=tmp_path, target="/workspace/inner")],
        )


def test_navi_labels_are_reserved(root: Path) -> None:
    with pytest.raises(InvalidInput, match="reserved"):
        spec_for(root, labels={"navi.instance": "someone-else"})
    assert spec_for(root, labels={"team": "x"}).labels["team"] == "x"


@pytest.mark.parametrize("exec_id", ["../x", "", "a/b", ".hidden", "x" * 200])
def test_ids_that_become_paths_are_validated(exec_id: str) -> None:
    with pytest.raises(ValidationError):
        ExecRequest(image="i", argv=["true"], exec_id=exec_id)
    with pytest.raises(ValidationError):
        ExecRequest(image="i", argv=["true"], exec_id="ok", session=exec_id)


def test_no_workspace_runs_in_tmp(root: Path) -> None:
    spec = spec_for(root)
    assert spec.workdir == "/tmp" and spec.mounts == ()
