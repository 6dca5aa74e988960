"""What one container costs the Docker engine here, apart from anything of ours.

    python -m bench.engine_cost [--runs N] [--image IMG]

Prints (1) the machine's busy CPU per container lifecycle (create → start → wait → remove,
sequential, our hardened flags; from ``/proc/stat``), which bounds executions/s on this
machine whatever the runtime does; (2) ``start`` with options taken away one at a time, to
show what the ~80 ms start is made of; (3) ``--network none`` against a per-session network
holder (``--network container:<holder>``). Engine only; removes every container it made.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import docker

from runtime.sandbox.docker.seccomp import DEFAULT_PROFILE_PATH, load_profile
from runtime.sandbox.docker.spec import ContainerSpec

LABEL = {"navi.bench": "engine_cost"}
VARIANTS = ("full", "no seccomp", "no init", "no limits", "no tmpfs", "bare")


def _spec(image: str, argv: list[str]) -> ContainerSpec:
    return ContainerSpec(
        image=image, argv=argv, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"}, workdir="/tmp",
        user="65534:65534", labels=LABEL, seccomp_profile=load_profile(DEFAULT_PROFILE_PATH),
        memory_bytes=256 << 20, pids_limit=64, nano_cpus=10**9, tmp_bytes=64 << 20, nofile=256,
        fsize_bytes=64 << 20,
    )


def _kwargs(api: docker.APIClient, spec: ContainerSpec, variant: str = "full",
            network: str = "none") -> dict[str, Any]:
    host = spec.host_config_kwargs()
    host["network_mode"] = network
    if variant == "no seccomp":
        host["security_opt"] = ["seccomp=unconfined", "no-new-privileges:true"]
    elif variant == "no init":
        host["init"] = False
    elif variant == "no limits":
        for key in ("pids_limit", "mem_limit", "memswap_limit", "nano_cpus", "oom_score_adj"):
            host.pop(key)
    elif variant == "no tmpfs":
        host.pop("tmpfs")
    elif variant == "bare":
        host = {"network_mode": network}
    kwargs = spec.create_kwargs(api.create_host_config(**host))
    kwargs["stdin_open"] = False
    if network != "none":
        kwargs.pop("hostname")  # shared with the holder
    return kwargs


def _busy_cpu_s() -> float:
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def _lifecycle(api: docker.APIClient, kwargs: dict[str, Any]) -> tuple[float, float]:
    """(start seconds, create-to-removed seconds) of one container."""
    began = time.perf_counter()
    container = api.create_container(**kwargs)["Id"]
    try:
        before = time.perf_counter()
        api.start(container)
        started = time.perf_counter() - before
        api.wait(container)
    finally:
        api.remove_container(container, force=True)
    return started, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--image", default="navi/python:latest")
    args = parser.parse_args()
    api = docker.APIClient(version="auto")
    spec = _spec(args.image, ["python3", "-I", "-c", "print(1)"])

    busy, began = _busy_cpu_s(), time.perf_counter()
    for _ in range(2 * args.runs):
        _lifecycle(api, _kwargs(api, spec))
    per = (_busy_cpu_s() - busy) / (2 * args.runs)
    print(f"busy CPU per container: {per * 1000:.0f} ms ({2 * args.runs} in "
          f"{time.perf_counter() - began:.1f} s) -> at most {os.cpu_count() / per:.1f}/s "
          f"on {os.cpu_count()} cores with nothing else running")

    starts: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(args.runs):
        for variant in VARIANTS:
            starts[variant].append(_lifecycle(api, _kwargs(api, _spec(args.image, ["true"]),
                                                           variant))[0])
    for variant, values in starts.items():
        print(f"start, {variant:10s} p50 {statistics.median(values) * 1000:5.0f} ms")

    holder = api.create_container(**{**_kwargs(api, spec), "command": ["sleep", "infinity"]})
    try:
        api.start(holder["Id"])
        totals: dict[str, list[float]] = {"none": [], "holder": []}
        for _ in range(args.runs):
            totals["none"].append(_lifecycle(api, _kwargs(api, spec))[1])
            totals["holder"].append(_lifecycle(
                api, _kwargs(api, spec, network=f"container:{holder['Id']}"))[1])
    finally:
        api.remove_container(holder["Id"], force=True)
    for name, values in totals.items():
        print(f"lifecycle, network {name:6s} p50 {statistics.median(values) * 1000:5.0f} ms")


if __name__ == "__main__":
    main()
