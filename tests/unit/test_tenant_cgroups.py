"""Where a container's cgroup is, under its tenant's cgroup parent (the warm path reads its
OOM count there; a wrong path costs every warm call a wait for the engine's exit state)."""

from __future__ import annotations

from runtime.sandbox.docker.warm_stream import cgroup_dirs


def test_engine_defaults_without_a_parent() -> None:
    assert cgroup_dirs("abc") == ["docker/abc", "system.slice/docker-abc.scope"]


def test_cgroupfs_parent_is_a_path() -> None:
    assert cgroup_dirs("abc", "/navi/t_1") == ["navi/t_1/abc"]


def test_systemd_slice_nests_by_dashes() -> None:
    assert cgroup_dirs("abc", "navi-t_1.slice") == ["navi.slice/navi-t_1.slice/docker-abc.scope"]
