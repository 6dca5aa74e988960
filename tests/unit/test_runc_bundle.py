"""The runc_direct candidate's bundle (``bench/runc_bundle.py``) carries ContainerSpec's
hardening: a path that measures cheaper by dropping a protection would be no candidate."""

from __future__ import annotations

import json
from pathlib import Path

from bench.runc_bundle import Bundle, oci_seccomp
from runtime.sandbox.docker.seccomp import DEFAULT_PROFILE_PATH


def test_the_seccomp_profile_keeps_no_rule_that_needs_a_capability() -> None:
    profile = json.loads(DEFAULT_PROFILE_PATH.read_text())
    oci = oci_seccomp(profile)
    assert oci["defaultAction"] == profile["defaultAction"]
    kept = {name for rule in oci["syscalls"] for name in rule["names"]}
    for rule in profile["syscalls"]:
        if (rule.get("includes") or {}).get("caps"):  # allowed only with a capability
            only_there = set(rule["names"]) - {
                n for r in profile["syscalls"] if not (r.get("includes") or {}).get("caps")
                for n in r["names"]}
            assert not only_there & kept
    assert all(set(rule) <= {"names", "action", "args", "errnoRet"} for rule in oci["syscalls"])


def test_the_config_is_hardened_like_a_container_spec(tmp_path: Path) -> None:
    bundle = Bundle("img", tmp_path / "ws", "/navi/t", tmp_path / "b", ["python3", "-I"])
    config = bundle.config("navi-direct-1")
    process, linux = config["process"], config["linux"]
    assert process["user"] == {"uid": 65534, "gid": 65534} and process["noNewPrivileges"]
    assert all(caps == [] for caps in process["capabilities"].values())
    assert config["root"]["readonly"] is True
    assert {n["type"] for n in linux["namespaces"]} == {
        "pid", "network", "ipc", "uts", "mount", "cgroup"}
    assert linux["seccomp"]["syscalls"] and linux["cgroupsPath"] == "/navi/t/navi-direct-1"
    tmp = next(m for m in config["mounts"] if m["destination"] == "/tmp")
    assert {"noexec", "nosuid", "nodev"} <= set(tmp["options"])
    limits = linux["resources"]
    assert limits["memory"]["limit"] == limits["memory"]["swap"] and limits["pids"]["limit"]
