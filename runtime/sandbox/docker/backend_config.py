"""``DockerBackendConfig``: where the Docker backend keeps things, whom it runs sandboxed code
as, its warm pool and egress proxies (``DockerBackendConfig.from_settings``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runtime.config import Settings
from runtime.egress import EgressConfig
from runtime.sandbox.docker.seccomp import DEFAULT_PROFILE_PATH
from runtime.sandbox.docker.warm_pool import WarmPoolConfig
from runtime.sandbox.models import MiB


class DockerBackendConfig(BaseModel):
    """Where the backend keeps things and whom it runs sandboxed code as."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data_dir: Path
    workspaces_root: Path
    sandbox_uid: int = Field(65534, ge=1)
    lease_grace_s: float = Field(30.0, ge=0)
    seccomp_profile_path: Path = DEFAULT_PROFILE_PATH
    instance_id: str | None = Field(None, description="None: the one kept in the data dir")
    base_url: str | None = Field(None, description="None: DOCKER_HOST or the local socket")
    artifact_max_bytes: int = Field(256 * MiB, ge=MiB)
    harden_workspaces_root: bool = True
    kill_grace_s: float = Field(5.0, gt=0, description="wait for the stream after a kill")
    max_threads: int = Field(32, ge=4)
    warm: WarmPoolConfig = Field(
        default_factory=WarmPoolConfig, description="warm containers (size 0: every call cold)"
    )
    egress: EgressConfig = Field(default_factory=EgressConfig, description="egress proxies")
    # `limits.runtime` -> the engine's name for it. `setup.sh` registers gVisor as `runsc`
    # (`--network=none --oci-seccomp --host-uds=open`: no network stack of its own, the
    # container's seccomp profile enforced inside too, the egress socket reachable).
    engine_runtimes: dict[str, str] = Field(
        default_factory=lambda: {"runc": "runc", "gvisor": "runsc"})
    tenant_cgroups: bool = Field(True, description="a cgroup parent per tenant (fair CPU)")
    warm_linger: bool = Field(True, description="a used warm runner waits to be removed "
                              "(False: it exits after its job, removed once stopped)")

    @property
    def artifacts_dir(self) -> Path:
        return self.data_dir / "artifacts"

    @classmethod
    def from_settings(
        cls, settings: Settings, *, warm_pool: bool = False, **overrides: Any
    ) -> DockerBackendConfig:
        """``warm_pool``: keep warm containers (a long-lived server; a one-shot CLI does not)."""
        values: dict[str, Any] = {
            "data_dir": settings.data_dir.resolve(),
            "workspaces_root": settings.workspaces_dir.resolve(),
            "sandbox_uid": settings.sandbox_uid,
            "lease_grace_s": settings.lease_grace_s,
            "tenant_cgroups": settings.tenant_cgroups,
            "egress": EgressConfig.from_settings(settings),
        }
        if warm_pool:
            values["warm"] = WarmPoolConfig(
                size=settings.warm_pool_size,
                idle_s=settings.warm_idle_s,
                burst=settings.warm_burst,
                per_tenant=settings.warm_per_tenant,
                total=settings.warm_total,
                late_bind=settings.warm_late_bind,
            )
        return cls(**{**values, **overrides})
