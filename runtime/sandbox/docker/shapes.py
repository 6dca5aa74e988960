"""What a call's container is made of: its ``ContainerSpec``, where its artifacts go, its
tenant's cgroup, the uid it runs as and the ownership of the directories it gets. A part of
``DockerBackend`` (its base class), apart from how calls run."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from runtime.sandbox.docker.backend_config import DockerBackendConfig
from runtime.sandbox.docker.drive import Capture
from runtime.sandbox.docker.spec import ContainerSpec, build_spec
from runtime.sandbox.models import ExecRequest


class ContainerShapes:
    """Needs the backend's config, seccomp profile text, engine cgroup driver, instance id."""

    config: DockerBackendConfig
    _seccomp: str
    _cgroup_driver: str
    _engine_cpus: int = os.cpu_count() or 1  # the engine's, read at start

    @property
    def instance_id(self) -> str:
        raise NotImplementedError

    def _spec(
        self, request: ExecRequest, image_id: str, egress: Path | None = None
    ) -> ContainerSpec:
        lease_until = int(time.time() + request.limits.timeout_s + self.config.lease_grace_s) + 1
        return build_spec(
            request,
            image_id=image_id,
            seccomp_profile=self._seccomp,
            sandbox_uid=self._uid(request),
            instance_id=self.instance_id,
            lease_until=lease_until,
            workspaces_root=self.config.workspaces_root,
            egress_socket=egress,
            engine_runtime=self.config.engine_runtimes[request.limits.runtime],
            cgroup_parent=self._cgroup_parent(request.tenant),
            engine_cpus=self._engine_cpus,
        )

    def _capture(self, request: ExecRequest) -> Capture:
        return Capture(artifacts_dir=self._artifacts_dir(request),
                       artifact_max_bytes=self.config.artifact_max_bytes,
                       kill_grace_s=self.config.kill_grace_s,
                       cgroup_parent=self._cgroup_parent(request.tenant))

    def _artifacts_dir(self, request: ExecRequest) -> Path:
        """Beside the workspace, on the session's own disk (they count against its quota and
        go with it; the sandbox cannot reach them), else under the data dir."""
        if request.workspace is not None:
            beside = request.workspace.parent / "artifacts"
            if beside.is_dir() and not beside.is_symlink():
                return beside
        return Path(self.config.artifacts_dir, request.session)

    def _cgroup_parent(self, tenant: str) -> str | None:
        """Each tenant's containers under a cgroup of the tenant's own: CPU is then shared
        between tenants (equal weights), not between containers, so one tenant running its
        maximum cannot take the CPU from another's calls (fair share: docs/security.md)."""
        if not self.config.tenant_cgroups or not re.fullmatch(r"[A-Za-z0-9_.-]{1,48}", tenant):
            return None
        if self._cgroup_driver == "systemd":
            return f"navi-{tenant.replace('-', '_')}.slice"
        return f"/navi/{tenant}"

    def _uid(self, request: ExecRequest) -> int:
        return request.uid if request.uid is not None else self.config.sandbox_uid

    def _prepare_workspace(self, request: ExecRequest) -> None:
        """The sandbox user must own the workspace and tmp directories to write in them."""
        if os.geteuid() != 0:
            return
        uid = self._uid(request)
        for directory in (request.workspace, request.tmp):
            if directory is None:
                continue
            st = os.lstat(directory)
            if (st.st_uid, st.st_gid) != (uid, uid):
                os.chown(directory, uid, uid, follow_symlinks=False)
