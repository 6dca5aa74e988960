"""The sandbox: every execution in one fresh, hardened, short-lived container.

Engine-neutral here: ``SandboxBackend`` (``backend.py``) is the seam every caller uses,
``models.py`` what goes in and comes out, ``FakeBackend`` (``fake.py``) a scripted backend
for tests, ``instance.py`` the supervisor's instance id. An engine is a sub-package:
``runtime.sandbox.docker`` (runc or gVisor under Docker) is the one there is.
"""

from runtime.sandbox.backend import OutputCallback, SandboxBackend, stream_run
from runtime.sandbox.models import ExecRequest, ExecResult, Limits, Mount, OutputChunk

__all__ = [
    "ExecRequest",
    "ExecResult",
    "Limits",
    "Mount",
    "OutputCallback",
    "OutputChunk",
    "SandboxBackend",
    "stream_run",
]
