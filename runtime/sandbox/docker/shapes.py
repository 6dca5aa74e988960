"""What a call's container is made of: its ``ContainerSpec``, where its artifacts go, its
tenant's cgroup, the uid it runs as and the ownership of the directories it gets.
``ContainerShapes`` is a collaborator of ``DockerBackend`` (``backend.shapes``), apart from
how calls run: it reads the backend's config and what the engine said at start
(``EngineFacts``, made first and given to both; the backend fills it in ``start()``)."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from runtime.errors import SandboxError
from runtime.sandbox.docker.backend_config import DockerBackendConfig
from runtime.sandbox.docker.drive import Capture
from runtime.sandbox.docker.spec import ContainerSpec, build_spec
from runtime.sandbox.models import ExecRequest


@dataclass
class EngineFacts:
    """What the backend learns when it starts: its instance id, the seccomp profile's text,
    the engine's cgroup driver and CPUs."""

    instance: str | None = None
    seccomp: str = ""
    cgroup_driver: str = "cgroupfs"
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)

    @property
    def instance_id(self) -> str:
        if self.instance is None:
            raise SandboxError("the Docker backend is not started")
        return self.instance


class ContainerShapes:
    """A call's container, from the backend's ``config`` and the ``engine``'s facts."""

    def __init__(self, config: DockerBackendConfig, engine: EngineFacts) -> None:
        self.config = config
        self.engine = engine

    def spec(
        self, request: ExecRequest, image_id: str, egress: Path | None = None
    ) -> ContainerSpec:
        lease_until = int(time.time() + request.limits.timeout_s + self.config.lease_grace_s) + 1
        return build_spec(
            request,
            image_id=image_id,
            seccomp_profile=self.engine.seccomp,
            sandbox_uid=self.uid(request),
            instance_id=self.engine.instance_id,
            lease_until=lease_until,
            workspaces_root=self.config.workspaces_root,
            egress_socket=egress,
            engine_runtime=self.config.engine_runtimes[request.limits.runtime],
            cgroup_parent=self.cgroup_parent(request.tenant),
            engine_cpus=self.engine.cpus,
        )

    def capture(self, request: ExecRequest) -> Capture:
        return Capture(artifacts_dir=self.artifacts_dir(request),
                       artifact_max_bytes=self.config.artifact_max_bytes,
                       kill_grace_s=self.config.kill_grace_s,
                       cgroup_parent=self.cgroup_parent(request.tenant))

    def artifacts_dir(self, request: ExecRequest) -> Path:
        """Beside the workspace, on the session's own disk (they count against its quota and
        go with it; the sandbox cannot reach them), else under the data dir."""
        if request.workspace is not None:
            beside = request.workspace.parent / "artifacts"
            if beside.is_dir() and not beside.is_symlink():
                return beside
        return Path(self.config.artifacts_dir, request.session)

    def cgroup_parent(self, tenant: str) -> str | None:
        """Each tenant's containers under a cgroup of the tenant's own: CPU is then shared
        between tenants (equal weights), not between containers, so one tenant running its
        maximum cannot take the CPU from another's calls (fair share: docs/security.md)."""
        if not self.config.tenant_cgroups or not re.fullmatch(r"[A-Za-z0-9_.-]{1,48}", tenant):
            return None
        if self.engine.cgroup_driver == "systemd":
            return f"navi-{tenant.replace('-', '_')}.slice"
        return f"/navi/{tenant}"

    def uid(self, request: ExecRequest) -> int:
        return request.uid if request.uid is not None else self.config.sandbox_uid

    def prepare_workspace(self, request: ExecRequest) -> None:
        """The sandbox user must own the workspace and tmp directories to write in them."""
        if os.geteuid() != 0:
            return
        uid = self.uid(request)
        for directory in (request.workspace, request.tmp):
            if directory is None:
                continue
            st = os.lstat(directory)
            if (st.st_uid, st.st_gid) != (uid, uid):
                os.chown(directory, uid, uid, follow_symlinks=False)
