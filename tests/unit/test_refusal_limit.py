"""Refused calls are rate-limited per tenant before their audit record is written; calls that
run are never limited and keep intent and outcome (real Executor, real audit file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.audit import AuditLog
from runtime.audit.buckets import TenantLimiter
from runtime.audit.changes import ChangeLimiter
from runtime.audit.refusals import RefusalLimiter
from runtime.errors import ChangeRateExceeded, PolicyDenied, RefusalRateExceeded
from runtime.executor import Executor, Invocation
from runtime.policy import Action, PolicyEngine, Subject
from runtime.sandbox.fake import FakeBackend, FakeResponse

ROOT = Path(__file__).resolve().parents[2]
PY = Action(tool="code_exec", args={"language": "python", "code": "print(1)"})
RUN = Invocation(argv=["python3", "-c", "print(1)"])


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("limiter_class", "error", "code"), [
    (RefusalLimiter, RefusalRateExceeded, "refusal_rate"),
    (ChangeLimiter, ChangeRateExceeded, "change_rate"),
])
def test_bucket_burst_then_rate_per_tenant(limiter_class: type[TenantLimiter],
                                           error: type[Exception], code: str) -> None:
    """Both limiters (refused calls; allowed changes) are one `TenantLimiter`."""
    clock = Clock()
    limiter = limiter_class(burst=3, rate=2.0, clock=clock)
    for _ in range(3):
        limiter.take("a")
    with pytest.raises(error) as caught:
        limiter.take("a")
    assert getattr(caught.value, "code", None) == code
    assert getattr(caught.value, "retry_after", None) == 1
    limiter.take("b")  # another tenant has a bucket of its own
    clock.now += 0.5  # one token back at 2/s
    limiter.take("a")
    with pytest.raises(error):
        limiter.take("a")
    clock.now += 60  # refills up to the burst, not beyond
    for _ in range(3):
        limiter.take("a")
    with pytest.raises(error):
        limiter.take("a")
    off = limiter_class(burst=0, rate=1.0)
    for _ in range(100):
        off.take("a")


def subject(tenant: str, profile: str) -> Subject:
    return Subject(tenant=tenant, user="tok", profile=profile, session=f"s_{tenant}")


async def test_a_flood_of_refusals_is_bounded_and_runs_are_not(audit: AuditLog) -> None:
    clock = Clock()
    backend = FakeBackend(default=FakeResponse(stdout=b"1\n"))
    executor = Executor(engine=PolicyEngine.from_file(ROOT / "policies" / "default.yaml"),
                        backend=backend, audit=audit,
                        resolve_image=lambda name: f"navi/{name}:latest",
                        refusals=RefusalLimiter(burst=20, rate=5.0, clock=clock))
    flooder, other = subject("acme", "secretary"), subject("beta", "secretary")
    denied = limited = 0
    for _ in range(1000):
        try:
            await executor.execute(flooder, PY, RUN)
        except RefusalRateExceeded as exc:
            limited += 1
            assert exc.retry_after >= 1
        except PolicyDenied:
            denied += 1
    assert (denied, limited) == (20, 980)
    records = await audit.records(kind="denied")
    assert len(records) == 20 and {r.tenant for r in records} == {"acme"}

    # another tenant's refusal is still a 403 with its record
    with pytest.raises(PolicyDenied):
        await executor.execute(other, PY, RUN)
    # the flooding tenant's allowed calls run and keep intent and outcome
    ran = await executor.execute(subject("acme", "developer"), PY, RUN)
    assert ran.ok
    assert [r.kind for r in await audit.records(exec_id=ran.exec_id)] == ["intent", "outcome"]
    assert len(backend.requests) == 1
    # tools that run no code are decided the same way
    with pytest.raises(RefusalRateExceeded):
        await executor.authorize(flooder, Action(tool="write_tool", args={}))
    clock.now += 1.0  # 5 more refusals a second are recorded again
    for _ in range(5):
        with pytest.raises(PolicyDenied):
            await executor.execute(flooder, PY, RUN)
    with pytest.raises(RefusalRateExceeded):
        await executor.execute(flooder, PY, RUN)
    assert len(await audit.records(kind="denied")) == 20 + 1 + 5
