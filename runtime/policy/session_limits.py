"""Limits of a session's background work: ``limits.processes`` and ``limits.ports``.

They are not limits of one call (``Limits``), so they resolve apart, in the same order:
built-in defaults -> ``defaults.limits`` -> the profile's ``limits`` (the server policy may
raise within the bounds); then the tenant's entry and any overlay can only lower numbers
and turn ``ports`` off. ``ports_rule`` names what decided ``ports`` (the 403's rule).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from runtime.policy.decision import Subject
from runtime.policy.limits_spec import LimitsSpec
from runtime.policy.model import PolicyFile, TenantOverlay


class ProcessLimits(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_per_session: int = 4
    max_kernels_per_session: int = 2
    max_agents_per_session: int = 4
    max_agent_depth: int = 2
    max_lifetime_s: float = 3600.0


class SessionLimits(BaseModel):
    model_config = ConfigDict(frozen=True)

    processes: ProcessLimits = ProcessLimits()
    ports: bool = False
    ports_rule: str = "default.limits.ports"


def _numbers(spec: LimitsSpec) -> dict[str, float]:
    if spec.processes is None:
        return {}
    return {k: v for k, v in spec.processes.model_dump().items() if v is not None}


def resolve(policy: PolicyFile, subject: Subject,
            overlays: list[tuple[str, TenantOverlay]]) -> SessionLimits:
    """The session's limits for ``subject``'s profile, lowered by ``overlays``
    ((rule prefix, overlay), e.g. the tenant's entry)."""
    values: dict[str, float] = dict(ProcessLimits().model_dump())
    ports, rule = False, "default.limits.ports"
    layers: list[tuple[str, LimitsSpec]] = [("defaults.limits", policy.defaults.limits)]
    profile = policy.profiles.get(subject.profile)
    if profile is not None:
        layers.append((f"profiles.{subject.profile}.limits", profile.limits))
    for prefix, spec in layers:
        values.update(_numbers(spec))
        if spec.ports is not None:
            ports, rule = spec.ports, f"{prefix}.ports"
    for prefix, overlay in overlays:
        for key, value in _numbers(overlay.limits).items():
            values[key] = min(values[key], value)
        if overlay.limits.ports is False and ports:
            ports, rule = False, f"{prefix}.limits.ports"
    return SessionLimits(processes=ProcessLimits(**values), ports=ports, ports_rule=rule)
