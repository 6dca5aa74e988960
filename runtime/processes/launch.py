"""Making a process's container run: the session's lease, egress, hooks, the container.

Everything taken here is given back if a later step fails (and by ``Ends`` when the
process ends): the lease on the session, the egress proxy, the container.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from runtime.policy.decision import Decision, Subject
from runtime.processes.egress import ProcessEgress
from runtime.processes.ends import Ends
from runtime.processes.live import LiveProcess
from runtime.processes.models import ProcessRecord, StartSpec
from runtime.processes.table import LaunchExtras, ProcessTable
from runtime.sandbox.docker import attach
from runtime.sandbox.models import ExecRequest
from runtime.sandbox.stdin_program import TINI_GROUP_ENV, shell_program

__all__ = ["LaunchExtras", "launch", "moved_cwd"]

WORKDIR = "/workspace"


def moved_cwd(cwd: str, workdir: str) -> str:
    """``cwd`` (under /workspace or /tmp) where the workspace is mounted at ``workdir``."""
    if cwd == WORKDIR or cwd.startswith(WORKDIR + "/"):
        return workdir + cwd[len(WORKDIR):]
    return cwd


def _send_command(attached: Any, frame: bytes) -> None:
    """The command, on stdin before any input can be written (never on argv: the engine's
    config and /proc/<pid>/cmdline show that); a program that exits first (its cwd gone)
    is no error here: the process ends with its status."""
    with contextlib.suppress(OSError):
        attach.raw_socket(attached).sendall(frame)


async def launch(table: ProcessTable, ends: Ends, subject: Subject, spec: StartSpec,
                 decision: Decision, record: ProcessRecord, *, lifetime_s: float
                 ) -> LiveProcess:
    backend = table.docker()
    services = table.services
    node = services.nodes.get(subject.node)
    undo: list[Callable[[], Awaitable[object]]] = []
    try:
        lease = await asyncio.to_thread(node.open, subject.tenant, subject.session)
        undo.append(lambda: asyncio.to_thread(lease.close))
        workspace = await asyncio.to_thread(node.verify, subject.tenant, subject.session)
        tmp = node.tmp_path(subject.tenant, subject.session)
        egress_socket = None
        egress_dir = None
        if decision.egress_allowlist:  # kept where the next server can serve it again
            egress = ProcessEgress(backend)
            undo.append(lambda: egress.forget(record.id))
            proxy = await egress.open(record.id, decision.egress_allowlist)
            undo.append(proxy.close)
            egress_socket, egress_dir = proxy.socket_path, egress.mount(record.id)
        extras = LaunchExtras()
        for hook in table.launch_hooks:
            more = await hook(record.public(), subject)
            if more is not None:
                extras = LaunchExtras(mounts=extras.mounts + more.mounts,
                                      argv_prefix=more.argv_prefix + extras.argv_prefix,
                                      env={**extras.env, **more.env},
                                      workdir=more.workdir or extras.workdir)
        workdir = extras.workdir or WORKDIR
        argv, frame = shell_program(spec.command, moved_cwd(record.cwd, workdir))
        request = ExecRequest(
            argv=argv, env=dict(spec.env), workspace=workspace, workdir=workdir, tmp=tmp,
            image=services.executor.resolve_image(
                decision.image or ""),
            limits=decision.limits,
            network="egress" if decision.egress_allowlist else "none",
            egress_allowlist=decision.egress_allowlist, exec_id=record.id,
            tenant=subject.tenant, session=subject.session, node=subject.node,
            uid=subject.sandbox_uid)
        containers = ends.containers_for(backend)
        container_spec = await containers.spec(
            request, record_id=record.id, lifetime_s=lifetime_s, egress=egress_socket,
            egress_dir=egress_dir,
            mounts=extras.mounts, argv_prefix=extras.argv_prefix,
            env={**extras.env, **TINI_GROUP_ENV}, home=extras.workdir)
        container = await containers.create(container_spec)
        undo.append(lambda: containers.remove(container))
        await table.records.set_container(record.id, container)
        outlog = await asyncio.to_thread(ends.log_of, record)
        attached: Any = await containers.attach_and_start(container)
        await asyncio.to_thread(_send_command, attached, frame)
    except BaseException:
        for step in reversed(undo):
            with contextlib.suppress(Exception):
                await step()
        raise
    live = LiveProcess(record.model_copy(update={"container": container}), container,
                       attached, outlog, services.hub.bus(subject.session))
    live.closers.extend(undo[:-1])  # the container is removed by the end itself
    ends.watch(live, lifetime_s)
    return live
