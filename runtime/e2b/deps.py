"""What the E2B bridge needs from the server that runs it: the parts, typed.

The API's `Services` satisfies `BridgeDeps`; the bridge takes the sessions' parts
(`runtime.sessions.deps.SessionDeps`: it opens and ends sessions as the API does) and the
services a sandbox's commands, files and code contexts go through.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from runtime.sessions.deps import SessionDeps

if TYPE_CHECKING:
    from runtime.config import Settings
    from runtime.kernels import KernelService
    from runtime.processes import ProcessService


class BridgeDeps(SessionDeps, Protocol):
    """Sessions opened, ended and reached (`SessionDeps`), their processes and kernels."""

    @property
    def settings(self) -> Settings: ...

    @property
    def processes(self) -> ProcessService: ...

    @property
    def kernels(self) -> KernelService | None: ...
