"""A policy's limits block (``limits:`` of defaults, profiles, tool rules and tenant overlays).

Apart from ``runtime.policy.model`` so that the one rule tying two keys together is next to
them: ``allow_root: true`` (a call may ask for uid 0 inside its sandbox) is only valid beside
``runtime: gvisor`` in the same block. Root inside gVisor stays inside gVisor's own kernel;
root on runc would be the host kernel's uid 0 behind only seccomp and dropped capabilities,
so the loader refuses it (file:line, as every policy error).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from runtime.sandbox.models import MiB


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProcessLimitsSpec(Strict):
    """Background work a session may keep running (``limits.processes``); unset keys
    inherit. Overlays can only lower them."""

    max_per_session: int | None = Field(None, ge=0, le=1024)
    max_kernels_per_session: int | None = Field(None, ge=0, le=64)
    max_agents_per_session: int | None = Field(None, ge=0, le=64)
    max_agent_depth: int | None = Field(None, ge=0, le=8, description="levels of sub-agents "
                                        "(spawn_agent) under a top-level agent; 0: none")
    max_lifetime_s: float | None = Field(None, gt=0, le=7 * 86400)


class LimitsSpec(Strict):
    """Partial limits; unset keys inherit. Bounds are the hard bounds of ``Limits``."""

    timeout_s: float | None = Field(None, gt=0, le=300, description="default timeout")
    max_timeout_s: float | None = Field(
        None, gt=0, le=300, description="largest timeout a caller may ask for (clamped)"
    )
    memory_mb: int | None = Field(None, ge=16, le=65536)
    runtime: Literal["runc", "gvisor"] | None = Field(
        None, description="sandbox tier; overlays can only move to gvisor")
    pids: int | None = Field(None, ge=8, le=32768)
    cpus: float | None = Field(None, gt=0, le=64)
    tmp_mb: int | None = Field(None, ge=1, le=65536)
    output_bytes: int | None = Field(None, ge=1024, le=256 * MiB, description="per stream")
    nofile: int | None = Field(None, ge=16, le=1048576)
    fsize_mb: int | None = Field(None, ge=1, le=65536, description="largest file (disk)")
    allow_root: bool | None = Field(
        None, description="calls may ask to run as root (uid 0) in the sandbox; only with "
        "runtime: gvisor in the same block (never on runc); overlays can only take it away")
    processes: ProcessLimitsSpec | None = Field(
        None, description="background processes, kernels and sub-agents of a session")
    ports: bool | None = Field(None, description="processes may declare ports (unset: no)")

    @model_validator(mode="after")
    def _root_only_under_gvisor(self) -> LimitsSpec:
        if self.allow_root and self.runtime != "gvisor":
            raise ValueError("allow_root: true needs runtime: gvisor in the same limits "
                             "(root inside gVisor only, never on runc)")
        return self
