"""``ContainerSpec``: every container the runtime creates, typed and frozen, secure by default.

Nothing reaches the Docker SDK as loose ``HostConfig`` kwargs: ``build_spec`` turns an
``ExecRequest`` into a ``ContainerSpec`` (validating env names, mounts and labels), and the
spec renders itself into the SDK's create arguments. The protections every container gets
(docs/sandbox.md) are fields with secure defaults; those that must never be relaxed are
``Literal`` types, so an insecure spec cannot even be constructed:

    network none · no host namespaces (ipc/cgroupns private) · never privileged · cap-drop ALL
    no-new-privileges · project seccomp profile · non-root uid:gid · read-only root
    /tmp: the session's tmp dir (``ExecRequest.tmp``) bound rw, else tmpfs
    rw,noexec,nosuid,nodev,size=… · HOME=/tmp · pids · memory = memory+swap
    cpus · ulimits nofile/fsize/core=0 · --init · log driver none · navi.* labels

The session's /tmp is a directory on its disk beside the workspace
(``runtime.workspace.tmpdir``): it persists between calls, counts in the session's disk quota
and is ``nosuid,nodev`` as the workspace is (the bind inherits the session disk's and the
workspaces root's flags: ``hostmounts``). It allows exec as ``/workspace`` does: both are the
same filesystem and the same uid, so ``noexec`` on one would only send code to the other
(and ``pip install --user`` puts programs in ``~/.local/bin``). Calls without a session
(web, ssh, MCP listings) keep the tmpfs.

Under gVisor the pids cgroup also holds runsc's own host tasks (the Sentry's Go threads, the
gofer, a stub process with threads per sandboxed process), while a blocked sandboxed thread
is a goroutine of the Sentry that the cgroup does not see. So there the cgroup gets
``gvisor_pids_room`` more than ``limits.pids`` (short of it, runsc cannot start a thread and
the whole call dies with exit 2), and ``limits.pids`` bounds the program through
``RLIMIT_NPROC``, which the Sentry counts over the sandbox's own tasks (under runc it would
count the uid's tasks host-wide: not set).
The seccomp profile is ``gvisor_profile``'s (clone3, see ``seccomp``).

Egress (``network == "egress"``) never adds a network: only the execution's proxy socket,
read-only at ``/run/navi/egress.sock``, the proxy environment and the ``navi-egress`` entry.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from runtime.egress import CONTAINER_SOCKET, container_env
from runtime.egress import ENTRY as EGRESS_ENTRY
from runtime.errors import InvalidInput
from runtime.sandbox.docker.seccomp import gvisor_profile
from runtime.sandbox.models import ExecRequest, MiB

SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RESERVED_ENV = frozenset({"PATH", "HOME", "LANG"})
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
LABEL_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")
MAX_ENV_BYTES = 64 * 1024
TMP_TARGET = "/tmp"
FORBIDDEN_TARGETS = ("/proc", "/sys", "/dev", "/tmp", "/etc", "/usr", "/bin", "/sbin", "/lib")

LABEL_EXEC_ID = "navi.exec_id"
LABEL_TENANT = "navi.tenant"
LABEL_SESSION = "navi.session"
LABEL_LEASE = "navi.lease_until"
LABEL_INSTANCE = "navi.instance"

GVISOR_PIDS_BASE = 96  # the Sentry's and the gofer's threads at rest, with headroom
GVISOR_PIDS_PER_CPU = 8  # the Go runtime runs more threads on more CPUs
GVISOR_PIDS_PER_TASK = 7  # a sandboxed process's stub (runsc's ptrace platform): ~6 measured


def gvisor_pids_room(engine_cpus: int, pids: int) -> int:
    """How many more tasks than ``pids`` (``limits.pids``) a gVisor container's pids cgroup
    allows: runsc's own, and the stubs of as many sandboxed processes as ``pids``."""
    return GVISOR_PIDS_BASE + GVISOR_PIDS_PER_CPU * max(1, engine_cpus) + (
        GVISOR_PIDS_PER_TASK * pids)


class BindMount(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    target: str
    read_only: bool = True
    propagation: Literal["rprivate", "rslave"] = Field(
        "rprivate", description="rslave: mounts made on the source later appear (late_bind)")


class ContainerSpec(BaseModel):
    """One hardened container. Defaults are the secure ones; see the module docstring."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image: str = Field(description="image id (sha256:…), so the digest is what really ran")
    argv: tuple[str, ...] = Field(min_length=1)
    env: dict[str, str]
    workdir: str
    user: str = Field(pattern=r"^([1-9][0-9]*:[1-9][0-9]*|0:0)$",
                      description="never root, but under gVisor when the policy allows it")
    labels: dict[str, str]
    mounts: tuple[BindMount, ...] = ()
    seccomp_profile: str = Field(min_length=2, description="profile JSON text")

    memory_bytes: int = Field(gt=0)
    pids_limit: int = Field(gt=0)
    nano_cpus: int = Field(gt=0)
    tmp_bytes: int = Field(gt=0)
    nofile: int = Field(gt=0)
    fsize_bytes: int = Field(gt=0)
    nproc: int | None = Field(None, gt=0, description="RLIMIT_NPROC (gVisor only: module doc)")

    network_mode: Literal["none"] = "none"
    privileged: Literal[False] = False
    cap_drop: tuple[Literal["ALL"]] = ("ALL",)
    no_new_privileges: Literal[True] = True
    read_only_root: Literal[True] = True
    ipc_mode: Literal["private"] = "private"
    cgroupns: Literal["private"] = "private"
    init: Literal[True] = True
    log_driver: Literal["none"] = "none"
    runtime: str = Field("runc", pattern=r"^[a-z][a-z0-9_.-]{0,63}$",
                         description="the engine's OCI runtime (runsc: gVisor)")
    cgroup_parent: str | None = Field(
        None, pattern=r"^/?[A-Za-z0-9_.-]{1,64}(/[A-Za-z0-9_.-]{1,64})?$",
        description="the tenant's own cgroup: the kernel shares CPU between tenants")
    oom_score_adj: int = Field(1000, ge=0, le=1000, description="host OOM killer picks us first")
    hostname: str = "sandbox"

    @model_validator(mode="after")
    def _root_only_in_gvisor(self) -> ContainerSpec:
        if self.user == "0:0" and not self.runtime.startswith("runsc"):
            raise ValueError("root inside a container only under gVisor (runsc)")
        return self

    def tmp_bound(self) -> bool:
        """Whether /tmp is the session's directory (bound) rather than a tmpfs."""
        return any(m.target == TMP_TARGET for m in self.mounts)

    def security_opt(self) -> list[str]:
        opts = [f"seccomp={self.seccomp_profile}"]
        if self.no_new_privileges:
            opts.append("no-new-privileges:true")
        return opts

    def host_config_kwargs(self) -> dict[str, Any]:
        """Arguments for ``APIClient.create_host_config``."""
        from docker.types import LogConfig, Mount, Ulimit

        return {
            "network_mode": self.network_mode,
            "privileged": self.privileged,
            "cap_drop": list(self.cap_drop),
            "security_opt": self.security_opt(),
            "read_only": self.read_only_root,
            "ipc_mode": self.ipc_mode,
            "cgroupns": self.cgroupns,
            "tmpfs": {} if self.tmp_bound() else
            {TMP_TARGET: f"rw,noexec,nosuid,nodev,size={self.tmp_bytes}"},
            "pids_limit": self.pids_limit,
            "mem_limit": self.memory_bytes,
            "memswap_limit": self.memory_bytes,
            "nano_cpus": self.nano_cpus,
            "oom_score_adj": self.oom_score_adj,
            "ulimits": [
                Ulimit(name="nofile", soft=self.nofile, hard=self.nofile),
                Ulimit(name="fsize", soft=self.fsize_bytes, hard=self.fsize_bytes),
                Ulimit(name="core", soft=0, hard=0),
                *([] if self.nproc is None else
                  [Ulimit(name="nproc", soft=self.nproc, hard=self.nproc)]),
            ],
            "init": self.init,
            "runtime": self.runtime,
            "cgroup_parent": self.cgroup_parent,
            "log_config": LogConfig(type=self.log_driver),
            "mounts": [
                Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only,
                      propagation=None if m.propagation == "rprivate" else m.propagation)
                for m in self.mounts
            ],
        }

    def create_kwargs(self, host_config: dict[str, Any]) -> dict[str, Any]:
        """Arguments for ``APIClient.create_container`` (stdin attached, closed after EOF)."""
        return {
            "image": self.image,
            "command": list(self.argv),
            "entrypoint": [],
            "environment": [f"{k}={v}" for k, v in self.env.items()],
            "working_dir": self.workdir,
            "user": self.user,
            "labels": dict(self.labels),
            "hostname": self.hostname,
            "stdin_open": True,
            "tty": False,
            "detach": False,
            "network_disabled": True,
            "use_config_proxy": False,
            "host_config": host_config,
        }


def sandbox_env(requested: dict[str, str]) -> dict[str, str]:
    """Only what the caller asked for (validated) plus PATH/HOME/LANG; never our environment."""
    total = 0
    for name, value in requested.items():
        if not ENV_NAME_RE.fullmatch(name):
            raise InvalidInput(f"environment variable name {name[:64]!r} is not allowed")
        if name in RESERVED_ENV:
            raise InvalidInput(f"environment variable {name} is set by the sandbox")
        if "\x00" in value:
            raise InvalidInput(f"environment variable {name} contains a NUL byte")
        total += len(name) + len(value.encode("utf-8", "surrogateescape")) + 2
    if total > MAX_ENV_BYTES:
        raise InvalidInput(f"environment is larger than {MAX_ENV_BYTES} bytes")
    return {**requested, "PATH": SANDBOX_PATH, "HOME": "/tmp", "LANG": "C.UTF-8"}


def _check_target(target: str) -> str:
    path = PurePosixPath(target)
    if not path.is_absolute() or ".." in path.parts or str(path) != target or target == "/":
        raise InvalidInput(f"mount target {target[:200]!r} must be a normalised absolute path")
    for forbidden in FORBIDDEN_TARGETS:
        if target == forbidden or target.startswith(forbidden + "/"):
            raise InvalidInput(f"mount target {target!r} is not allowed")
    return target


def _check_source(source: Path, *, directory: bool) -> str:
    if not source.is_absolute():
        raise InvalidInput(f"mount source {str(source)[:200]!r} must be absolute")
    try:
        st = os.lstat(source)
    except OSError as exc:
        raise InvalidInput(f"mount source {source} does not exist") from exc
    if stat.S_ISLNK(st.st_mode) or os.path.realpath(source) != str(source):
        raise InvalidInput(f"mount source {source} must not be or contain a symlink")
    if not (stat.S_ISDIR(st.st_mode) or (not directory and stat.S_ISREG(st.st_mode))):
        kind = "directory" if directory else "regular file or directory"
        raise InvalidInput(f"mount source {source} must be a {kind}")
    return str(source)


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def _session_dir_source(path: Path, workspaces_root: Path, what: str) -> str:
    source = _check_source(path, directory=True)
    root = os.path.realpath(workspaces_root)
    if os.path.commonpath([root, source]) != root or source == root:
        raise InvalidInput(f"the {what} must be a directory below the workspaces root")
    return source


def build_mounts(request: ExecRequest, workspaces_root: Path) -> tuple[BindMount, ...]:
    """The workspace read-write at ``request.workdir``, the session's tmp directory
    read-write at /tmp, plus read-only inputs; nothing else."""
    mounts: list[BindMount] = []
    targets: set[str] = set()
    if request.workspace is not None:
        source = _session_dir_source(request.workspace, workspaces_root, "workspace")
        target = _check_target(request.workdir)
        mounts.append(BindMount(source=source, target=target, read_only=False))
        targets.add(target)
    if request.tmp is not None:
        source = _session_dir_source(request.tmp, workspaces_root, "tmp directory")
        if any(_overlaps(TMP_TARGET, other) for other in targets):
            raise InvalidInput("the workspace overlaps /tmp")
        mounts.append(BindMount(source=source, target=TMP_TARGET, read_only=False))
        targets.add(TMP_TARGET)
    for mount in request.mounts:
        if not mount.read_only:
            raise InvalidInput(f"extra mount {mount.target!r} must be read-only")
        target = _check_target(mount.target)
        if any(_overlaps(target, other) for other in targets):
            raise InvalidInput(f"mount target {target!r} overlaps another mount")
        mounts.append(BindMount(source=_check_source(mount.source, directory=False), target=target))
        targets.add(target)
    return tuple(mounts)


def egress_mount(socket_path: Path, others: tuple[BindMount, ...]) -> BindMount:
    """The execution's egress proxy socket, read-only at ``CONTAINER_SOCKET`` (connect()
    needs no write access to the mount; the directory above it is root's, 0755)."""
    st = os.lstat(socket_path)
    if not stat.S_ISSOCK(st.st_mode) or os.path.realpath(socket_path) != str(socket_path):
        raise InvalidInput(f"egress socket {socket_path} is not a socket")
    if any(_overlaps(CONTAINER_SOCKET, m.target) for m in others):
        raise InvalidInput(f"a mount overlaps the egress socket at {CONTAINER_SOCKET}")
    return BindMount(source=str(socket_path), target=CONTAINER_SOCKET, read_only=True)


def build_labels(request: ExecRequest, *, instance_id: str, lease_until: int) -> dict[str, str]:
    for key in request.labels:
        if not LABEL_KEY_RE.fullmatch(key) or key.startswith("navi."):
            raise InvalidInput(f"label {key[:64]!r} is not allowed (navi.* is reserved)")
    return {
        **request.labels,
        LABEL_EXEC_ID: request.exec_id,
        LABEL_TENANT: request.tenant,
        LABEL_SESSION: request.session,
        LABEL_LEASE: str(lease_until),
        LABEL_INSTANCE: instance_id,
    }


# In every image (sandbox_images/_shared/navi-stdio): under gVisor a program's stdout/stderr
# go through the sandbox's own pipes and are relayed with retried writes (runsc answers long
# writes to its host pipes with short writes, which many programs do not retry).
STDIO_ENTRY = "/usr/local/bin/navi-stdio"


def relayed(spec_argv: tuple[str, ...], argv: tuple[str, ...]) -> tuple[str, ...]:
    """``argv`` behind the same stdio relay as ``spec_argv`` (a warm container's runner)."""
    return (STDIO_ENTRY, *argv) if spec_argv[:1] == (STDIO_ENTRY,) else argv


def build_spec(
    request: ExecRequest,
    *,
    image_id: str,
    seccomp_profile: str,
    sandbox_uid: int,
    instance_id: str,
    lease_until: int,
    workspaces_root: Path,
    egress_socket: Path | None = None,
    engine_runtime: str = "runc",
    cgroup_parent: str | None = None,
    engine_cpus: int = 1,
) -> ContainerSpec:
    """``egress_socket``: the execution's proxy socket, required iff ``network == "egress"``;
    it adds the socket mount, the proxy environment and the ``navi-egress`` entry to argv.
    ``engine_cpus``: the engine's CPUs (the room runsc's own tasks need grows with them)."""
    limits = request.limits
    argv, env = tuple(request.argv), sandbox_env(request.env)
    mounts = build_mounts(request, workspaces_root)
    if (request.network == "egress") != (egress_socket is not None):
        raise InvalidInput("network egress needs the execution's egress proxy socket")
    if egress_socket is not None:
        mounts += (egress_mount(egress_socket, mounts),)
        env, argv = {**env, **container_env()}, (EGRESS_ENTRY, *argv)
    pids_limit, nproc = limits.pids, None
    if limits.runtime == "gvisor":
        argv = (STDIO_ENTRY, *argv)
        seccomp_profile = gvisor_profile(seccomp_profile)
        pids_limit, nproc = limits.pids + gvisor_pids_room(engine_cpus, limits.pids), limits.pids
    return ContainerSpec(
        image=image_id,
        argv=argv,
        env=env,
        workdir=request.workdir if request.workspace is not None else "/tmp",
        user="0:0" if request.root else f"{sandbox_uid}:{sandbox_uid}",
        labels=build_labels(request, instance_id=instance_id, lease_until=lease_until),
        mounts=mounts,
        seccomp_profile=seccomp_profile,
        memory_bytes=limits.memory_mb * MiB,
        pids_limit=pids_limit,
        nano_cpus=int(limits.cpus * 1_000_000_000),
        tmp_bytes=limits.tmp_mb * MiB,
        nofile=limits.nofile,
        fsize_bytes=limits.fsize_mb * MiB,
        nproc=nproc,
        runtime=engine_runtime,
        cgroup_parent=cgroup_parent,
    )
