"""A request's names resolved to this node's paths, and results named back without them.

Why: what crosses the hop names the session and what to mount (`runtime.nodes.wire`); only
the node knows where its session's workspace, /tmp and tool objects are. Calls and
background processes (`runtime.cluster.agent.processes`) resolve the same way.
"""

from __future__ import annotations

from pathlib import Path

from runtime.cluster.agent.objects import NodeObjects
from runtime.nodes.wire import RunOnNode
from runtime.sandbox.models import ExecRequest, ExecResult, Mount
from runtime.workspace import Workspace
from runtime.workspace.manager import Workspaces


def resolved(wanted: RunOnNode, workspaces: Workspaces, objects: NodeObjects) -> ExecRequest:
    """The call with this node's paths: its own session's workspace and /tmp, and the tool
    objects it names from this node's object directory (kept first if sent). Blocking."""
    request = wanted.call()
    tenant, session = request.tenant, request.session
    mounts = []
    for obj in wanted.objects:
        source = (objects.put(obj.sha256, obj.data) if obj.data is not None
                  else objects.get(obj.sha256))
        mounts.append(Mount(source=source, target=obj.target, read_only=True))
    return request.model_copy(update={
        "workspace": None if request.workspace is None else workspaces.path(tenant, session),
        "tmp": None if request.tmp is None else workspaces.tmp_path(tenant, session),
        "mounts": mounts})


def resolved_and_leased(wanted: RunOnNode, workspaces: Workspaces, objects: NodeObjects
                        ) -> tuple[ExecRequest, Workspace | None]:
    """`resolved`, and the session's workspace held open for the call when it mounts the
    session's files: one worker-thread hop for both. Blocking."""
    request = resolved(wanted, workspaces, objects)
    if request.workspace is None and request.tmp is None:
        return request, None
    return request, workspaces.open(request.tenant, request.session)


def relative(request: ExecRequest, result: ExecResult, workspaces: Workspaces) -> ExecResult:
    """Artifacts named relative to the session's directory, never by a path here."""
    if not result.artifacts:
        return result
    base = workspaces.session_dir(request.tenant, request.session)
    shown = []
    for found in map(Path, result.artifacts):
        shown.append(str(found.relative_to(base)) if found.is_relative_to(base)
                     else f"artifacts/{found.name}")
    return result.model_copy(update={"artifacts": shown})
