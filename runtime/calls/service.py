"""`SessionToolCall`: the one path by which a caller runs a tool in a session.

The exec route (`POST /v1/sessions/{id}/exec`), the agent loop's tool calls, the MCP
server and `navi exec` (a CLI subject, its own session) all come here, so a call is
assembled, announced, counted and reported one way:

    look the tool up -> one worker hop: open the workspace, validate the arguments
    -> ToolContext (inputs only; bad arguments: refused, policy first) -> `tool_call` event
    -> registry.run (policy, audit, Executor, sandbox; live `exec_output`) -> `ToolOutcome`
    -> metrics -> `tool_result` event (with the deciding rule) -> the typed `ToolResult`

A request refused before it runs (no such tool, bad arguments) announces nothing (no
event) unless the caller announced it itself (`CallRequest.announced`: the agent shows every
call its model made); every announced call gets exactly one `tool_result`. Errors
propagate as `NaviError`s after they are counted and, for an announced call, reported; the
caller maps them (HTTP status, a tool error the model reads). The result's `execution` is
the typed run behind it (`Execution`: the exec result's fields, `ok` decided once),
never rebuilt from `metadata`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from runtime import tracing
from runtime.calls.caps import EVENT_ERROR, EVENT_TEXT, clip
from runtime.calls.images import image_refs
from runtime.calls.live_output import LiveOutput
from runtime.errors import InvalidInput, NaviError, NotFound, PolicyDenied, QuotaExceeded
from runtime.events import EventHub, SessionEventBus, ToolCallEvent, ToolResultEvent, link_refs
from runtime.executor import Approver, Executor, new_exec_id
from runtime.kernels.models import kernel_view
from runtime.metrics import Metrics, tool_label
from runtime.nodes.base import OpenFiles
from runtime.policy.decision import Subject
from runtime.sandbox.backend import OutputCallback
from runtime.tools.base import CallOrigin, Tool, ToolContext, ToolResult
from runtime.tools.event_args import event_args
from runtime.tools.registry import ToolRegistry
from runtime.workspace.tmpdir import Root

TOOL_NAME_SHOWN = 200


class SessionFiles(Protocol):
    """Where a session's files are: its node (`runtime.nodes.SessionNode`, by
    `Subject.node`) for the server, `runtime.calls.local.WorkspaceDir` for `navi exec` (one
    directory, or none)."""

    def verify(self, tenant_id: str, session_id: str) -> Path | None: ...

    def open(self, tenant_id: str, session_id: str, *, root: Root = "workspace"
             ) -> OpenFiles | None: ...

    def tmp_path(self, tenant_id: str, session_id: str) -> Path | None: ...


OutputTo = Callable[[SessionEventBus, str], OutputCallback | None]
"""Where a call's live output goes, given its session bus and exec id (the server:
`LiveOutput`, `exec_output` events; `navi exec`: its own stdout and stderr)."""


@dataclass(frozen=True)
class CallRequest:
    """One call. `args` are what the caller received (a JSON object, validated by the
    registry); `timeout_s` is the caller's wish (the policy clamps it)."""

    tool: str
    args: Any
    timeout_s: float | None = None
    exec_id: str = field(default_factory=new_exec_id)
    origin: CallOrigin = CallOrigin()
    announced: bool = False  # the caller published this call's `tool_call` itself


def describe_failure(exc: NaviError) -> str:
    """A refused or failed call in one line, as a model (or a human) can act on it."""
    if isinstance(exc, PolicyDenied):
        return f"denied by policy (rule {exc.rule}): {exc.message}"
    if isinstance(exc, QuotaExceeded):
        return f"{exc.message}; retry after {exc.retry_after} s"
    if isinstance(exc, InvalidInput | NotFound):
        return exc.message
    return f"{exc.code}: {exc.message}"


def expected(exc: NaviError) -> bool:
    """A refusal the caller's input explains (not a fault of the runtime worth a warning)."""
    return isinstance(exc, PolicyDenied | QuotaExceeded | InvalidInput | NotFound)


@dataclass(frozen=True)
class _Prepared:
    """What a call's worker hop made: its workspace, its arguments as events show them, and
    the validated parameters, or what refused them (kept as data, not as the exception: a
    stored exception's traceback holds the frame that holds the arguments, a cycle only the
    garbage collector frees — 11 MiB a refused request)."""

    path: Path | None
    workspace: OpenFiles | None
    shown: Any
    params: Any
    tmp: Path | None = None
    refusal: tuple[type[InvalidInput], str, dict[str, Any]] | None = None

    def refused(self) -> InvalidInput | None:
        if self.refusal is None:
            return None
        kind, message, details = self.refusal
        return kind(message, **details)


class SessionToolCall:
    """Runs tool calls for every caller; built once per app (`Services.calls`), or once per
    `navi exec` (a CLI subject, the directory it names, output to its terminal)."""

    def __init__(self, *, registry: ToolRegistry, executor: Executor,
                 workspaces: SessionFiles | Callable[[str], SessionFiles],
                 hub: EventHub, metrics: Metrics,
                 approver_for: Callable[[SessionEventBus], Approver | None],
                 output_to: OutputTo = LiveOutput) -> None:
        """`workspaces`: the files of every session, or a node id -> its node
        (`runtime.nodes.Nodes.get`: a session's files are on `Subject.node`)."""
        self.registry = registry
        self.executor = executor
        self.workspaces = workspaces
        self.hub = hub
        self.metrics = metrics
        self.approver_for = approver_for
        self.output_to = output_to

    def label(self, tool: str, *, found: bool) -> str:
        """The call's metric label, from a closed set (callers name tools at will)."""
        return tool_label(tool, self.registry.builtin_names(), found=found)

    def announce(self, subject: Subject, request: CallRequest, shown_args: Any) -> None:
        """Publish `tool_call` (for callers that announce before the call is checked)."""
        self.hub.bus(subject.session).publish(ToolCallEvent(
            tool=request.tool[:TOOL_NAME_SHOWN], args=shown_args, exec_id=request.exec_id,
            **_origin(request)))

    def refused(self, subject: Subject, request: CallRequest, error: str, code: str) -> None:
        """A call its caller refused before it got here (e.g. a tool the profile does not
        offer): counted, and reported as its `tool_result`."""
        self.metrics.executions.labels(subject.tenant, self.label(request.tool, found=False),
                                       code).inc()
        self.hub.bus(subject.session).publish(ToolResultEvent(
            tool=request.tool[:TOOL_NAME_SHOWN], success=False, error=clip(error, EVENT_ERROR),
            exec_id=request.exec_id, code=code, **_origin(request)))

    async def __call__(self, subject: Subject, request: CallRequest) -> ToolResult:
        tool = request.tool[:TOOL_NAME_SHOWN]
        with tracing.span(f"execute_tool {tool}", {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": request.origin.call_id, "navi.tenant": subject.tenant,
                "navi.session": subject.session, "navi.exec_id": request.exec_id,
                "navi.turn_id": request.origin.turn_id}) as span:
            result = await self._call(subject, request)
            run = result.execution
            tracing.annotate(span, {"navi.success": result.success,
                                    "navi.audit_seq": run.audit_seq if run else None})
            return result

    async def _call(self, subject: Subject, request: CallRequest) -> ToolResult:
        bus = self.hub.bus(subject.session)
        try:
            tool = await self.registry.lookup(request.tool, subject)
        except NaviError as exc:  # no such tool
            self._failed(bus, subject, request, self.label(request.tool, found=False), exc)
            raise
        # one worker-thread hop (the registry's, bounded per tenant) for the blocking and
        # CPU-bound parts: the session's disk and directory, the arguments as events may
        # show them, and their validation (each linear in their size)
        prep = await self.registry.off_loop(subject.tenant, self._prepare, subject, request,
                                            tool)
        ctx = ToolContext(subject=subject, workspace=prep.workspace,
                          workspace_path=prep.path, tmp_path=prep.tmp,
                          open_tmp=self._tmp_opener(subject, prep.tmp),
                          executor=self.executor,
                          on_output=self.output_to(bus, request.exec_id),
                          timeout_s=request.timeout_s, exec_id=request.exec_id,
                          approver=self.approver_for(bus), origin=request.origin)
        try:
            if (refused := prep.refused()) is not None:
                try:
                    await self.registry.refuse_invalid(tool, request.args, ctx, refused)
                except NaviError as exc:  # bad arguments (or a denied tool's)
                    self._failed(bus, subject, request, self.label(request.tool, found=False),
                                 exc)
                    raise
                finally:
                    refused = None  # the frame its traceback holds must not hold it
            label = self.label(request.tool, found=True)
            if not request.announced:
                bus.publish(ToolCallEvent(tool=request.tool[:TOOL_NAME_SHOWN], args=prep.shown,
                                          exec_id=request.exec_id, **_origin(request)))
            active = self.metrics.active.labels(subject.tenant)
            active.inc()
            try:
                outcome = await self.registry.run(tool, prep.params, ctx)
            except NaviError as exc:
                self._failed(bus, subject, request, label, exc, announced=True)
                raise
            finally:
                active.dec()
        finally:
            if prep.workspace is not None:
                prep.workspace.close()
        result = outcome.result
        self._count(subject.tenant, label, result)
        bus.publish(_result_event(request, result, outcome.rule))
        return result

    def _files(self, subject: Subject) -> SessionFiles:
        where = self.workspaces
        return where(subject.node) if callable(where) else where

    def _tmp_opener(self, subject: Subject, tmp: Path | None
                    ) -> Callable[[], OpenFiles | None] | None:
        """How a tool opens the session's /tmp through the safe layer (None: it has none)."""
        if tmp is None:
            return None
        return partial(self._files(subject).open, subject.tenant, subject.session, root="tmp")

    def _prepare(self, subject: Subject, request: CallRequest, tool: Tool) -> _Prepared:
        files = self._files(subject)
        path = files.verify(subject.tenant, subject.session)
        workspace = files.open(subject.tenant, subject.session)
        try:
            tmp = files.tmp_path(subject.tenant, subject.session)  # open made it
            shown = None if request.announced else event_args(request.args)
            try:
                return _Prepared(path, workspace, shown, tool.validate(request.args), tmp)
            except InvalidInput as exc:  # refused on the loop: the policy may speak first
                refusal = (type(exc), exc.message, exc.details)
        except BaseException:
            if workspace is not None:
                workspace.close()
            raise
        return _Prepared(path, workspace, shown, None, tmp, refusal)

    def _count(self, tenant: str, label: str, result: ToolResult) -> None:
        run = result.execution
        outcome = "ok" if result.success else "failed"
        if run is not None and run.timed_out:
            outcome = "timeout"
        elif run is not None and run.oom_killed:
            outcome = "oom"
        self.metrics.executions.labels(tenant, label, outcome).inc()
        if run is not None:
            self.metrics.duration.labels(tenant, label).observe(run.duration_ms / 1000)

    def _failed(self, bus: SessionEventBus, subject: Subject, request: CallRequest, label: str,
                exc: NaviError, *, announced: bool = False) -> None:
        tenant = subject.tenant
        if isinstance(exc, PolicyDenied):
            self.metrics.denials.labels(tenant, label, exc.rule).inc()
            self.metrics.executions.labels(tenant, label, "denied").inc()
        else:
            self.metrics.executions.labels(tenant, label, exc.code).inc()
        if announced or request.announced:
            bus.publish(ToolResultEvent(
                tool=request.tool[:TOOL_NAME_SHOWN], success=False,
                error=clip(describe_failure(exc), EVENT_ERROR), exec_id=request.exec_id,
                code=exc.code, rule=exc.rule if isinstance(exc, PolicyDenied) else None,
                **_origin(request)))


def _origin(request: CallRequest) -> dict[str, Any]:
    o = request.origin
    return {"turn_id": o.turn_id, "call_id": o.call_id, "iteration": o.iteration}


def _result_event(request: CallRequest, result: ToolResult, rule: str | None
                  ) -> ToolResultEvent:
    run = result.execution
    fields: dict[str, Any] = {}
    if run is not None:
        fields = run.model_dump(exclude={"exec_id"})
        fields["stdout"] = clip(run.stdout, EVENT_TEXT)
        fields["stderr"] = clip(run.stderr, EVENT_TEXT)
    return ToolResultEvent(
        tool=request.tool[:TOOL_NAME_SHOWN], success=result.success,
        output=clip(result.output, EVENT_TEXT),
        error=clip(result.error, EVENT_ERROR) if result.error else None,
        exec_id=request.exec_id, rule=rule, images=image_refs(result) or None,
        kernel=kernel_view(result.metadata.get("kernel")),
        **link_refs(result.metadata), **_origin(request), **fields)
