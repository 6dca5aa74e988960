"""Allowed state changes are held to a per-tenant rate: a token bucket, and the Executor's
`record_action`/`meter_change` recording a refusal past it (real audit file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.audit import AuditLog
from runtime.audit.changes import ChangeLimiter
from runtime.audit.refusals import RefusalLimiter
from runtime.errors import ChangeRateExceeded
from runtime.executor import Executor
from runtime.policy import PolicyEngine, Subject
from runtime.sandbox.fake import FakeBackend

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_changes_past_the_rate_are_refused_and_recorded_as_refusals(audit: AuditLog
                                                                         ) -> None:
    clock = Clock()
    executor = Executor(engine=PolicyEngine.from_file(ROOT / "policies" / "default.yaml"),
                        backend=FakeBackend(), audit=audit, resolve_image=lambda n: n,
                        changes=ChangeLimiter(burst=5, rate=1.0, clock=clock),
                        refusals=RefusalLimiter(burst=3, rate=1.0, clock=clock))
    who = Subject(tenant="t_a", user="tok", session="s_1")
    for i in range(5):
        await executor.record_action(who, "file.write", f"f{i}", rule="roles.user")
    with pytest.raises(ChangeRateExceeded):
        await executor.record_action(who, "file.write", "f5", rule="roles.user")
    with pytest.raises(ChangeRateExceeded):
        await executor.meter_change(who, "kernel.exec")
    # not metered: a session's creation is not a change a tenant can flood
    await executor.record_action(who, "session.create", "s_2", rule="profiles.x")
    other = Subject(tenant="t_b", user="tok", session="s_9")
    await executor.record_action(other, "file.delete", "x", rule="roles.user")
    for _ in range(3):  # the refusals themselves are under the refusal rate
        with pytest.raises(ChangeRateExceeded):
            await executor.meter_change(who, "file.write")
    records = await audit.records(tenant="t_a")
    denied = [r for r in records if r.kind == "denied"]
    assert len(denied) == 3 and {r.rule for r in denied} == {"limits.change_rate"}
    assert [r.tool for r in denied][:2] == ["file.write", "kernel.exec"]
    assert [r.action for r in records if r.kind == "action"].count("file.write") == 5
