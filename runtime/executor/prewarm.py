"""A new session's first call, warmed before it is made.

``prewarm`` asks the backend to start filling the tenant's pool of warm containers
(``runtime.sandbox.docker.late_bind``) for a ``code_exec`` call of the session, so its first
call (and its tenant's very first call) finds one ready. Nothing runs and nothing is
audited: the policy is only asked which image and limits such a call would get; a call it
would not allow outright (denied, asks for approval, holds secrets or egress) warms nothing.
The launches run in the backend's background, within its pool's ``per_tenant`` and
``total`` budget; a backend without ``prefill`` (a remote node's, a fake) warms nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from runtime.executor.outcome import new_exec_id
from runtime.logging import get_logger
from runtime.policy.decision import Action, Subject
from runtime.policy.engine import PolicyEngine
from runtime.sandbox.models import ExecRequest
from runtime.sandbox.stdin_program import python_program

log = get_logger("runtime.executor")

FIRST_CALL = Action(tool="code_exec", args={"language": "python", "code": ""},
                    group="group:exec")
"""What a new session is warmed for: the call agents and harnesses make first."""


async def prewarm(engine: PolicyEngine, backend: Any, resolve_image: Callable[[str], str],
                  subject: Subject, workspace: Path, tmp: Path | None) -> bool:
    """True when the backend was asked to launch warm containers for ``subject``'s session."""
    prefill: Callable[[ExecRequest], Awaitable[bool]] | None = getattr(backend, "prefill",
                                                                       None)
    if prefill is None:
        return False
    decision = engine.decide(subject, FIRST_CALL)
    if (decision.verdict != "allow" or decision.image is None or decision.secrets
            or decision.stdin_secret or decision.egress_allowlist):
        return False
    argv, frame = python_program("")
    request = ExecRequest(argv=argv, stdin=frame, workspace=workspace, tmp=tmp,
                          image=resolve_image(decision.image), limits=decision.limits,
                          exec_id=new_exec_id(), tenant=subject.tenant,
                          session=subject.session, node=subject.node,
                          uid=subject.sandbox_uid)
    try:
        return await prefill(request)
    except Exception as exc:  # the first call runs cold, as it did before
        log.warning("prewarm_failed", session=subject.session, error=str(exc))
        return False
