"""Inside an E2B sandbox's containers the session's workspace is `/home/user`.

E2B code expects its files, its cwd and `HOME` at `/home/user`; Navi's own API mounts the
workspace at `/workspace`. A launch hook of Navi's process service asks for the workspace
at `/home/user` (and `HOME` there) for the processes of sessions made through `/e2b` only;
the code interpreter passes the same `workdir` to its kernels (`runtime.e2b.interpreter`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runtime.e2b.paths import HOME
from runtime.e2b.store import SandboxStore
from runtime.policy.decision import Subject

if TYPE_CHECKING:
    from runtime.e2b.deps import BridgeDeps
    from runtime.processes.launch import LaunchExtras

WORKDIR = "/workspace"  # where Navi's own containers mount the session's workspace


def navi_cwd(cwd: str | None) -> str:
    """E2B's cwd (`/home/user` by default) in the process service's terms: the same
    directory named under /workspace (its launch moves it under `/home/user` again)."""
    if not cwd or cwd == "~":
        cwd = HOME
    if cwd == HOME or cwd.startswith(HOME + "/"):
        return WORKDIR + cwd[len(HOME):]
    return cwd


def add_home_hook(services: BridgeDeps) -> None:
    """Hook the process service once: an E2B sandbox's commands see their workspace at
    /home/user, which is also their cwd and HOME."""
    from runtime.processes.launch import LaunchExtras

    processes = getattr(services, "processes", None)
    if processes is None:  # a server without background processes
        return
    store = SandboxStore(services.store)

    async def hook(_info: Any, subject: Subject) -> LaunchExtras | None:
        if await store.get(subject.tenant, subject.session) is None:
            return None
        return LaunchExtras(workdir=HOME)

    processes.launch_hooks.append(hook)
