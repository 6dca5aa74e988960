"""What the process service's parts share, passed to them instead of the service itself.

`ProcessService` (``service.py``) holds one `ProcessTable` and hands it to `Ends`
(``ends.py``), `launch` (``launch.py``), `adopt_all` (``adopt.py``) and `wait_for`
(``monitor.py``): each takes only the parts below, so none of them imports the service.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.errors import Conflict
from runtime.policy.decision import Subject
from runtime.processes.admit import Places
from runtime.processes.live import LiveProcess
from runtime.processes.models import ProcessInfo
from runtime.processes.records import ProcessStore
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.docker.spec import BindMount

if TYPE_CHECKING:
    from runtime.processes.deps import ProcessDeps


@dataclass(frozen=True)
class LaunchExtras:
    """What a launch hook adds to a process's container (e.g. the ports relay). ``workdir``:
    the workspace is mounted there instead of /workspace, and it is the container's HOME; a
    cwd under /workspace is taken to the same place under it (E2B's /home/user)."""

    mounts: tuple[BindMount, ...] = ()
    argv_prefix: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None


LaunchHook = Callable[[ProcessInfo, Subject], Awaitable[LaunchExtras | None]]
EndHook = Callable[[ProcessInfo], Awaitable[None]]


@dataclass
class ProcessTable:
    services: ProcessDeps
    records: ProcessStore
    places: Places
    logs_dir: Path
    live: dict[str, LiveProcess] = field(default_factory=dict)
    launch_hooks: list[LaunchHook] = field(default_factory=list)
    on_end: list[EndHook] = field(default_factory=list)

    def docker(self) -> DockerBackend:
        backend = self.services.nodes.local.backend
        if not isinstance(backend, DockerBackend):
            raise Conflict("background processes need the Docker engine (this server runs "
                           "calls on another backend)")
        return backend
