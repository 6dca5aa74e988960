"""Other kinds of a session's background work, listed and handled beside its processes.

A sub-agent running in the background (``kind: "agent"``) is not a container, but a user
sees it where processes are (``process_list``, ``GET .../processes``) and stops, reads and
waits for it with the same tools. Its owner registers a provider (``register_kind``) whose
ids start with ``prefix`` (never ``p_``, which is ours).
"""

from __future__ import annotations

from typing import Protocol

from runtime.policy.decision import Subject
from runtime.processes.models import ProcessInfo, ProcessOutput, WaitResult


class ProcessKind(Protocol):
    prefix: str

    async def list(self, subject: Subject) -> list[ProcessInfo]: ...

    async def get(self, subject: Subject, process_id: str) -> ProcessInfo:
        """``NotFound`` when the session has no such one."""
        ...

    async def output(self, subject: Subject, process_id: str, since: int) -> ProcessOutput: ...

    async def stop(self, subject: Subject, process_id: str) -> ProcessInfo: ...

    async def wait(self, subject: Subject, process_id: str, pattern: str | None,
                   timeout_s: float | None) -> WaitResult: ...

    async def end_session(self, session_id: str) -> None: ...
