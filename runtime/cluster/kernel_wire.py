"""Kernel requests to a node agent: JSON, validated by pydantic there.

An execute travels as a call does (`runtime.nodes.wire.RunOnNode`: the session's names for
its workspace and /tmp, never a path); the rest of a session's kernels (list, stop, idle
save, the session's end, an execute's interruption) is one `KernelOp`, naming the session
and the kernel by id. The node resolves them under its own data dir.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from runtime.kernels.models import KERNEL_NAME
from runtime.nodes.wire import _Wire
from runtime.sandbox.models import SAFE_ID_PATTERN
from runtime.store.ids import check_session_id, check_tenant_id

PER_SESSION = ("list", "stop", "stop_running")


class KernelOp(_Wire):
    """`list` a session's kernels; `stop` one and forget its saved names (`stop_running`:
    only if it runs now: its token ended); `kill` an execute (it is interrupted);
    `save_idle` those unused for `unused_s`; `end_session`: its kernels stop, nothing saved."""

    op: Literal["list", "stop", "stop_running", "kill", "save_idle", "end_session"]
    tenant: str | None = Field(None, max_length=128)
    session: str | None = Field(None, pattern=SAFE_ID_PATTERN)
    name: str | None = Field(None, pattern=KERNEL_NAME.pattern)
    exec_id: str | None = Field(None, pattern=SAFE_ID_PATTERN)
    unused_s: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _complete(self) -> KernelOp:
        if self.op in PER_SESSION:
            if self.tenant is None or self.session is None:
                raise ValueError(f"{self.op} names the tenant and the session")
            check_tenant_id(self.tenant)
            check_session_id(self.session)
        if self.op in ("stop", "stop_running") and self.name is None:
            raise ValueError(f"{self.op} names the kernel")
        if self.op == "kill" and self.exec_id is None:
            raise ValueError("kill names the execute")
        if self.op == "save_idle" and self.unused_s is None:
            raise ValueError("save_idle says how long unused")
        if self.op == "end_session" and self.session is None:
            raise ValueError("end_session names the session")
        return self
