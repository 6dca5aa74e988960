"""The sandbox: every execution in one fresh, hardened, short-lived container.

``SandboxBackend`` (``backend.py``) is the seam; ``DockerBackend`` is the real one,
``ContainerSpec`` the typed, secure-by-default container description in front of the SDK,
``Reaper`` the safety net for containers that outlived their lease or their supervisor.
"""

from runtime.sandbox.backend import OutputCallback, SandboxBackend, stream_run
from runtime.sandbox.docker_backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker_errors import map_docker_errors
from runtime.sandbox.models import ExecRequest, ExecResult, Limits, Mount, OutputChunk
from runtime.sandbox.reaper import Reaper
from runtime.sandbox.spec import ContainerSpec, build_spec

__all__ = [
    "ContainerSpec",
    "DockerBackend",
    "DockerBackendConfig",
    "ExecRequest",
    "ExecResult",
    "Limits",
    "Mount",
    "OutputCallback",
    "OutputChunk",
    "Reaper",
    "SandboxBackend",
    "build_spec",
    "map_docker_errors",
    "stream_run",
]
