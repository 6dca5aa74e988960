"""A cheaper fresh container to measure (issue 44): ``runc run`` on an OCI bundle, no dockerd,
containerd or shim in the path (``navi bench engine --paths runc_direct``).

The bundle is made from the same image and carries the same hardening as ``ContainerSpec``:
the image's layers as a read-only overlay root (Docker stays the image store), uid 65534,
no capabilities, no-new-privileges, the project seccomp profile (Docker's form turned into
the OCI form as dockerd does: rules whose ``includes`` need a capability are dropped, as
every capability is), new pid/net/ipc/uts/mount/cgroup namespaces (network: loopback only),
Docker's masked and read-only /proc paths, /tmp a tmpfs (noexec,nosuid,nodev), the workspace
bound read-write, pids/memory(=swap)/cpu limits, nofile/fsize/core rlimits, oom_score_adj
1000, the cgroup under the path's ``/navi/<tenant>``. Not the same: no ``--init`` (the job
is pid 1; ``print(1)`` starts no child), no log driver, no engine bookkeeping (no inspect,
no events, no container record), so nothing but ``runc`` would find a leftover.
A measurement, not a backend: nothing in ``runtime/`` uses it.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import uuid
from pathlib import Path
from typing import Any

from runtime.sandbox.docker.seccomp import DEFAULT_PROFILE_PATH
from runtime.sandbox.models import Limits

MASKED = ["/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
          "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
          "/sys/firmware"]
READ_ONLY = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def oci_seccomp(profile: dict[str, Any]) -> dict[str, Any]:
    """Docker's profile as the OCI runtime spec wants it, for a container with no capability
    on this architecture (Docker's own evaluation of ``includes``/``excludes``)."""
    rules = []
    for rule in profile["syscalls"]:
        inc, exc = rule.get("includes", {}), rule.get("excludes", {})
        if inc.get("caps") or (inc.get("arches") and ARCH not in inc["arches"]):
            continue
        if exc.get("arches") and ARCH in exc["arches"]:
            continue
        kept = {k: v for k, v in rule.items() if k in ("names", "action", "args", "errnoRet")}
        rules.append(kept)
    native = f"SCMP_ARCH_{platform.machine().upper()}"
    arch_map = [a for a in profile.get("archMap") or [] if a["architecture"] == native]
    arches = [a["architecture"] for a in arch_map] + [
        s for a in arch_map for s in a.get("subArchitectures") or []]
    out = {"defaultAction": profile["defaultAction"], "architectures": arches,
           "syscalls": rules}
    if "defaultErrnoRet" in profile:
        out["defaultErrnoRet"] = profile["defaultErrnoRet"]
    return out


def image_layers(image: str) -> list[str]:
    """The image's layer directories, top first (overlay2)."""
    data = json.loads(subprocess.run(
        ["docker", "image", "inspect", image, "--format", "{{json .GraphDriver.Data}}"],
        capture_output=True, text=True, check=True).stdout)
    return [data["UpperDir"], *data.get("LowerDir", "").split(":")] if data.get("LowerDir") \
        else [data["UpperDir"]]


class Bundle:
    """One bundle (read-only root, reused), a fresh container id per call."""

    def __init__(self, image: str, workspace: Path, cgroup: str, directory: Path,
                 argv: list[str], limits: Limits | None = None) -> None:
        self.dir, self.cgroup, self.argv = directory, cgroup, argv
        self.limits = limits or Limits()
        self.rootfs = directory / "rootfs"
        self.workspace = workspace
        self.image = image
        self.state = directory / "state"  # runc --root: our containers only

    def make(self) -> None:
        self.rootfs.mkdir(parents=True, exist_ok=True)
        self.state.mkdir(exist_ok=True)
        lower = ":".join(image_layers(self.image))
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"ro,lowerdir={lower}",
                        str(self.rootfs)], check=True)

    def config(self, container_id: str) -> dict[str, Any]:
        lim = self.limits
        seccomp = oci_seccomp(json.loads(DEFAULT_PROFILE_PATH.read_text()))
        dev = ["nosuid", "strictatime", "mode=755", "size=65536k"]
        return {
            "ociVersion": "1.0.2",
            "process": {
                "terminal": False, "user": {"uid": 65534, "gid": 65534},
                "args": self.argv, "cwd": "/workspace",
                "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        "HOME=/tmp", "LANG=C.UTF-8"],
                "capabilities": {k: [] for k in ("bounding", "effective", "inheritable",
                                                 "permitted", "ambient")},
                "rlimits": [
                    {"type": "RLIMIT_NOFILE", "hard": lim.nofile, "soft": lim.nofile},
                    {"type": "RLIMIT_FSIZE", "hard": lim.fsize_mb << 20,
                     "soft": lim.fsize_mb << 20},
                    {"type": "RLIMIT_CORE", "hard": 0, "soft": 0}],
                "noNewPrivileges": True, "oomScoreAdj": 1000,
            },
            "root": {"path": str(self.rootfs), "readonly": True},
            "hostname": "sandbox",
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc",
                 "options": ["nosuid", "noexec", "nodev"]},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": dev},
                {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
                 "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
                {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
                 "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
                {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
                 "options": ["nosuid", "noexec", "nodev"]},
                {"destination": "/sys", "type": "sysfs", "source": "sysfs",
                 "options": ["nosuid", "noexec", "nodev", "ro"]},
                {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                 "options": ["rw", "noexec", "nosuid", "nodev", f"size={lim.tmp_mb}m"]},
                {"destination": "/workspace", "type": "bind", "source": str(self.workspace),
                 "options": ["rbind", "rw", "nosuid", "nodev"]},
            ],
            "linux": {
                "cgroupsPath": f"{self.cgroup}/{container_id}",
                "resources": {
                    "memory": {"limit": lim.memory_mb << 20, "swap": lim.memory_mb << 20},
                    "pids": {"limit": lim.pids},
                    "cpu": {"quota": int(lim.cpus * 100_000), "period": 100_000},
                    "devices": [{"allow": False, "access": "rwm"}],
                },
                "namespaces": [{"type": t} for t in
                               ("pid", "network", "ipc", "uts", "mount", "cgroup")],
                "maskedPaths": MASKED, "readonlyPaths": READ_ONLY, "seccomp": seccomp,
            },
        }

    def run(self) -> bytes:
        """One call in a fresh container: ``runc run`` (create + start + wait + delete)."""
        container_id = f"navi-direct-{uuid.uuid4().hex[:12]}"
        (self.dir / "config.json").write_text(json.dumps(self.config(container_id)))
        done = subprocess.run(["runc", "--root", str(self.state), "run", "--bundle",
                               str(self.dir), container_id], capture_output=True,
                              stdin=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"runc run failed: {done.stderr.decode(errors='replace')}")
        return done.stdout

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.rootfs)], check=False)
        for leftover in os.listdir(self.state) if self.state.is_dir() else []:
            subprocess.run(["runc", "--root", str(self.state), "delete", "-f", leftover],
                           check=False, capture_output=True)
