"""What a gVisor call's ContainerSpec adds to runc's: pids room for runsc, RLIMIT_NPROC, and
the seccomp profile with clone3 let through (``spec.py``, ``seccomp.py``); runc keeps its own.
Red: with ``build_spec`` treating both tiers alike, the gVisor half of each test fails."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.sandbox.docker.seccomp import load_profile
from runtime.sandbox.docker.spec import ContainerSpec, build_spec, gvisor_pids_room
from runtime.sandbox.models import ExecRequest, Limits


def spec_for(tmp_path: Path, tier: str, *, cpus: int = 2) -> ContainerSpec:
    request = ExecRequest(image="navi/python:latest", argv=["true"], exec_id="e1",
                          limits=Limits(pids=64, runtime=tier))
    return build_spec(request, image_id="sha256:abc", seccomp_profile=load_profile(),
                      sandbox_uid=65534, instance_id="navi-test-1234", lease_until=2_000_000_000,
                      workspaces_root=tmp_path, engine_runtime="runsc" if tier == "gvisor"
                      else "runc", engine_cpus=cpus)


def clone3_rules(spec: ContainerSpec) -> list[dict[str, object]]:
    rules = json.loads(spec.seccomp_profile)["syscalls"]
    return [r for r in rules if r["names"] == ["clone3"]]


def test_gvisor_gets_room_for_runsc_and_bounds_the_program_by_nproc(tmp_path: Path) -> None:
    runc, gvisor = spec_for(tmp_path, "runc"), spec_for(tmp_path, "gvisor")
    assert (runc.pids_limit, runc.nproc) == (64, None)
    assert "nproc" not in {u["Name"] for u in runc.host_config_kwargs()["ulimits"]}
    assert gvisor.pids_limit == 64 + 96 + 8 * 2 + 7 * 64 == 64 + gvisor_pids_room(2, 64)
    assert spec_for(tmp_path, "gvisor", cpus=16).pids_limit == 64 + 96 + 8 * 16 + 7 * 64
    ulimits = {u["Name"]: (u["Soft"], u["Hard"]) for u in gvisor.host_config_kwargs()["ulimits"]}
    assert ulimits["nproc"] == (64, 64)


def test_only_gvisor_lets_clone3_through(tmp_path: Path) -> None:
    runc, gvisor = spec_for(tmp_path, "runc"), spec_for(tmp_path, "gvisor")
    assert [(r["action"], r.get("errnoRet")) for r in clone3_rules(runc)] == [
        ("SCMP_ACT_ERRNO", 38)]
    assert [(r["action"], r.get("errnoRet")) for r in clone3_rules(gvisor)] == [
        ("SCMP_ACT_ALLOW", None)]
    others = json.loads(runc.seccomp_profile)
    others["syscalls"] = [r for r in others["syscalls"] if r["names"] != ["clone3"]]
    same = json.loads(gvisor.seccomp_profile)
    same["syscalls"] = [r for r in same["syscalls"] if r["names"] != ["clone3"]]
    assert others == same  # nothing else differs
