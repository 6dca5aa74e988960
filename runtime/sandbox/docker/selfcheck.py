"""Self-check of the sandbox on this host: what ``navi doctor`` runs. Fails closed.

Configuration is not proof: the engine may ignore an option, a kernel may lack a feature, a
profile may not load. So beyond "engine reachable, images present, profile valid", a probe
container made by the real ``DockerBackend`` reports what the kernel actually enforces
(``/proc/self/status``, cgroup files, syscalls answered) and each promise is checked against
it. Any check that cannot run counts as failed, and so does a probe that exits non-zero
even after printing its report (under gVisor, runsc dies with exit 2 when it cannot start its
own threads: the report may be out before).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass

from runtime.errors import NaviError
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.docker.errors import map_docker_errors
from runtime.sandbox.docker.seccomp import load_profile
from runtime.sandbox.models import ExecRequest, Limits

PROBE_LIMITS = Limits(timeout_s=30, memory_mb=128, pids=64, tmp_mb=8, output_bytes=64 * 1024)

PROBE = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
status = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)
def read(*paths):
    for p in paths:
        try:
            return open(p).read().strip()
        except OSError:
            pass
    return None
def mount_opts(point):
    rows = [l.split() for l in open('/proc/self/mountinfo') if l.split()[4] == point]
    return rows[-1][5].split(',') if rows else []
try:
    open('/navi-doctor', 'w')
    root_write = 'written'
except OSError as e:
    root_write = errno.errorcode.get(e.errno, str(e.errno))
r = libc.ptrace(0, 0, None, None)
landlock = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(VERSION): the ABI, or -1
print(json.dumps({
    'CapEff': status['CapEff'].strip(), 'CapBnd': status['CapBnd'].strip(),
    'NoNewPrivs': status['NoNewPrivs'].strip(), 'Seccomp': status['Seccomp'].strip(),
    'uid': os.getuid(), 'gid': os.getgid(),
    'net': sorted(os.listdir('/sys/class/net')),
    'root_write': root_write,
    'memory': read('/sys/fs/cgroup/memory/memory.limit_in_bytes', '/sys/fs/cgroup/memory.max'),
    'pids': read('/sys/fs/cgroup/pids/pids.max', '/sys/fs/cgroup/pids.max'),
    'ptrace': [r, ctypes.get_errno()],
    'workspace': mount_opts('/workspace'), 'tmp': mount_opts('/tmp'),
    'landlock_abi': landlock,
}))
"""


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def _probe_checks(report: dict[str, object], sandbox_uid: int) -> list[Check]:
    def check(name: str, ok: bool, seen: object) -> Check:
        return Check(name, ok, f"saw {seen}")

    memory = str(PROBE_LIMITS.memory_mb * 1024 * 1024)
    workspace = set(report["workspace"])  # type: ignore[call-overload]
    tmp = set(report["tmp"])  # type: ignore[call-overload]
    landlock = report.get("landlock_abi")
    return [
        check("no capabilities (CapEff 0)", report["CapEff"] == "0" * 16, report["CapEff"]),
        check("empty bounding set (CapBnd 0)", report["CapBnd"] == "0" * 16, report["CapBnd"]),
        check(
            "no-new-privileges (NoNewPrivs 1)", report["NoNewPrivs"] == "1", report["NoNewPrivs"]
        ),
        check("seccomp filter active (Seccomp 2)", report["Seccomp"] == "2", report["Seccomp"]),
        check(
            "project profile loaded (ptrace EPERM)", report["ptrace"] == [-1, 1], report["ptrace"]
        ),
        check(
            f"non-root user ({sandbox_uid})",
            report["uid"] == sandbox_uid and report["uid"] != 0,
            f"uid {report['uid']} gid {report['gid']}",
        ),
        check("no network but lo", report["net"] == ["lo"], report["net"]),
        check("read-only root filesystem", report["root_write"] == "EROFS", report["root_write"]),
        check(
            f"memory cgroup limit ({memory} bytes)", report["memory"] == memory, report["memory"]
        ),
        check(
            f"pids cgroup limit ({PROBE_LIMITS.pids})",
            report["pids"] == str(PROBE_LIMITS.pids),
            report["pids"],
        ),
        check("/tmp noexec,nosuid,nodev", {"noexec", "nosuid", "nodev"} <= tmp, sorted(tmp)),
        check("workspace nosuid,nodev", {"nosuid", "nodev"} <= workspace, sorted(workspace)),
        check(  # the CAD tools confine OpenSCAD with it and refuse to run without it
            "Landlock available (OpenSCAD file confinement)",
            isinstance(landlock, int) and landlock >= 1,
            f"ABI {landlock}",
        ),
    ]


GVISOR_PROBE = r"""
import ctypes, errno, json, os, resource, threading
libc = ctypes.CDLL(None, use_errno=True)
done = []
threads = [threading.Thread(target=done.append, args=(i,)) for i in range(8)]
try:
    for t in threads: t.start()
    for t in threads: t.join()
except RuntimeError:
    pass
try:
    open('/var/tmp/navi-doctor', 'w')  # world-writable: only a read-only mount refuses
    root_write = 'written'
except OSError as e:
    root_write = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps({'kernel': os.uname().release, 'uid': os.getuid(),
                  'net': sorted(os.listdir('/sys/class/net')), 'root_write': root_write,
                  'nnp': libc.prctl(39, 0, 0, 0, 0), 'ptrace': [libc.ptrace(0, 0, None, None),
                                                                ctypes.get_errno()],
                  'threads': len(done), 'nproc': resource.getrlimit(resource.RLIMIT_NPROC)}))
"""


def _gvisor_checks(report: dict[str, object], sandbox_uid: int) -> list[Check]:
    def check(name: str, ok: bool, seen: object) -> Check:
        return Check(f"gVisor: {name}", ok, f"saw {seen}")

    host = os.uname().release
    return [
        check("its own kernel answers (not the host's)", report["kernel"] != host,
              f"{report['kernel']} (host {host})"),
        check("non-root user", report["uid"] == sandbox_uid and report["uid"] != 0,
              report["uid"]),
        check("no network but lo", report["net"] == ["lo"], report["net"]),
        check("read-only root filesystem", report["root_write"] == "EROFS",
              report["root_write"]),
        check("no-new-privileges", report["nnp"] == 1, report["nnp"]),
        check("seccomp profile enforced inside (ptrace EPERM)", report["ptrace"] == [-1, 1],
              report["ptrace"]),
        check("threads start and join (8)", report["threads"] == 8, report["threads"]),
        check(f"tasks bounded (RLIMIT_NPROC {PROBE_LIMITS.pids})",
              report["nproc"] == [PROBE_LIMITS.pids] * 2, report["nproc"]),
    ]


async def _probe_gvisor(backend: DockerBackend, image: str) -> list[Check]:
    """The second tier: registered with the engine, and confined when asked for."""
    engine_name = backend.config.engine_runtimes["gvisor"]
    if engine_name not in backend.runtimes:
        return [Check("gVisor tier registered", False,
                      f"the engine has no {engine_name!r} runtime: calls whose policy asks "
                      "for gvisor are refused (`make run` registers it; README: Runtime tiers)")]
    report = await _run_probe(backend, image, GVISOR_PROBE,
                              PROBE_LIMITS.model_copy(update={"runtime": "gvisor"}))
    if isinstance(report, Check):
        return [Check("gVisor tier registered", True, engine_name), report]
    return [Check("gVisor tier registered", True, engine_name),
            *_gvisor_checks(report, backend.config.sandbox_uid)]


async def run_checks(backend: DockerBackend, images: list[str]) -> list[Check]:
    """Every check, in order; nothing raises (a failure is a failed ``Check``)."""
    checks: list[Check] = []
    try:
        load_profile(backend.config.seccomp_profile_path)
        checks.append(
            Check("seccomp profile valid", True, str(backend.config.seccomp_profile_path))
        )
    except NaviError as exc:
        checks.append(Check("seccomp profile valid", False, exc.message))
        return checks
    try:
        await backend.start()
        with map_docker_errors("ask the engine for its version"):
            version = backend.api.version().get("Version", "?")
        checks.append(Check("engine reachable", True, f"Docker {version}"))
    except NaviError as exc:
        checks.append(Check("engine reachable", False, exc.message))
        return checks
    state = backend.workspaces_root_state
    checks.append(
        Check(
            "workspaces root nosuid,nodev",
            state in ("already", "remounted"),
            f"{backend.config.workspaces_root}: {state}",
        )
    )
    present = []
    for image in images:
        try:
            with map_docker_errors(f"inspect {image}", image=image):
                image_id = backend.api.inspect_image(image)["Id"]
            checks.append(Check(f"image {image}", True, image_id[:19]))
            present.append(image)
        except NaviError as exc:
            checks.append(Check(f"image {image}", False, exc.message))
    if not present:
        checks.append(Check("confinement probe", False, "no image to run the probe in"))
        return checks
    checks.extend(await _probe(backend, present[0]))
    checks.extend(await _probe_gvisor(backend, present[0]))
    return checks


async def _run_probe(backend: DockerBackend, image: str, code: str, limits: Limits
                     ) -> dict[str, object] | Check:
    """The probe's JSON report, or the failed check that says why there is none."""
    workspace = backend.config.workspaces_root / f"doctor-{uuid.uuid4().hex[:12]}"
    workspace.mkdir(mode=0o700, parents=True)
    request = ExecRequest(
        image=image,
        argv=["python3", "-c", code],
        exec_id=f"doctor-{uuid.uuid4().hex[:12]}",
        session="doctor",
        tenant="doctor",
        workspace=workspace,
        limits=limits,
    )
    name = f"confinement probe ran ({limits.runtime})"
    try:
        result = await backend.run(request)
    except NaviError as exc:
        return Check(name, False, exc.message)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    detail = f"exit {result.exit_code}: {result.stderr[-300:].decode(errors='replace')}"
    if not result.ok:  # a non-zero exit, the deadline or the OOM killer: not a pass
        return Check(name, False, detail)
    try:
        report = json.loads(result.stdout)
    except ValueError:
        return Check(name, False, detail)
    return dict(report)


async def _probe(backend: DockerBackend, image: str) -> list[Check]:
    report = await _run_probe(backend, image, PROBE, PROBE_LIMITS)
    if isinstance(report, Check):
        return [report]
    probe = Check("confinement probe ran", True, image)
    return [probe, *_probe_checks(report, backend.config.sandbox_uid)]
