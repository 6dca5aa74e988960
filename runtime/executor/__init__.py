"""The Executor: the only path by which anything runs in a sandbox.

Nothing else may call ``SandboxBackend.run``. One call::

    quota check -> policy decide -> (ask: approver) -> audit intent (fsync) -> backend.run
    -> audit outcome (committed; fsync'd with the next intent or within 50 ms)

(The backend prepares — resolves the image, creates or takes a container — while the
intent is being fsync'd, and starts the job only once it is durable: ``before_start``, a
``StartGate`` the audit writer opens on its own thread, where a warm job is started at once.)

Use (API routes, tools, the CLI)::

    executor = Executor(engine=..., backend=..., audit=..., resolve_image=lambda n: ref,
                        approver=None)
    outcome = await executor.execute(
        subject,                    # Subject(tenant, role, user, profile, session)
        action,                     # Action(tool, args, group, timeout_s, tool_hash, ...)
        Invocation(argv=[...], stdin=b"", env={}, workspace=Path|None, mounts=[...]),
        on_output=callback,         # async (OutputChunk) -> None, live output (optional)
        exec_id=None,               # generated ("ex_" + 24 hex) unless given
        approver=None,              # per-call approver, overrides the default
    )
    outcome.result                  # ExecResult;  outcome.public() -> the exec result's fields
    outcome.audit_seq               # seq of the *outcome* record (intent_seq: of the intent)

    await executor.kill(exec_id)    # cancellation: the run returns, the outcome is audited
    await executor.cancel_session(session); await executor.kill_all(reason)
    decision = await executor.authorize(subject, action)  # tools that run no code
    seq = await executor.record_action(subject, "token.create", token_id, rule=...)
                                    # a state change that is not an execution: audited
                                    # (fsync) BEFORE it is applied; see its docstring

Errors (all audited before they are raised, except ``AuditUnavailable`` itself and
``RefusalRateExceeded``: a tenant past its rate of refused calls, ``runtime.audit.refusals``,
gets that 429 instead of its refusal and no record; calls that run are never limited):
``QuotaExceeded(retry_after)`` (audited ``denied``, rule ``quotas.<quota>``),
``DiskQuotaExceeded`` from an invocation built after admission (a user tool's copy; audited
``denied``, rule ``quotas.tenant_disk_mb``),
``PolicyDenied(rule)`` (audited ``denied``; an ``ask`` without an approver, or refused, is a
denial too), ``AuditUnavailable`` (the intent could not be written: nothing ran; fail closed),
``SandboxError`` from the backend (audited as the outcome, ``detail`` = error code).
If the task running ``execute`` is cancelled, the container is killed and an
``interrupted`` record closes the intent.

Approvals: an approver is ``async (subject, action, decision) -> bool``. Unless the caller
set them, the Executor fills ``Action.first_use`` and ``Action.approved_hash`` from what
this process has seen and approved (per tenant and tool), so `ask: first_use` and
`ask: hash_change` work without the caller keeping state. Approvals are recorded as
``approval`` records; the memory is not persisted (after a restart, the policy asks again).

Network: a sandbox's network mode is always ``none``. When the decision grants egress (a
non-empty ``egress_allowlist``), the request says ``network="egress"`` with that list and the
backend runs the call with its own allowlisting proxy (``runtime/egress``) reached over a
unix socket mounted into the container: the only way out, for those names only. The grant is
in the intent's ``limits``; what was allowed and refused is in ``ExecResult.egress`` and, one
line, in the outcome's ``detail`` (``egress: allowed pypi.org:443 x2; refused …``).

Modules, one job each: ``outcome`` (the types a caller hands in and gets back),
``admission`` (quota, policy, approvals, refusals recorded), ``recorder`` (the write-ahead
run: intent, backend, outcome, interruption), ``core`` (``Executor``: them in order, and
cancellation).
"""

from runtime.executor.core import Executor
from runtime.executor.outcome import (
    EXEC_ID,
    Approver,
    ExecOutcome,
    Invocation,
    InvocationFor,
    new_exec_id,
)
from runtime.executor.recorder import REDACTED, SecretSource, redact

__all__ = ["EXEC_ID", "REDACTED", "Approver", "ExecOutcome", "Executor", "Invocation",
           "InvocationFor", "SecretSource", "new_exec_id", "redact"]
