"""What every tool is: a name, a group, a JSON-schema'd parameter model and an async `execute`.

Arguments are validated *before* anything runs (`Tool.validate` raises `InvalidInput` with a
message an LLM can act on). A tool never reaches for global state: what a call needs (who
asks, the session workspace, the Executor, the live-output callback) arrives in a
`ToolContext`, which carries inputs only; what a tool needs for its whole life (a store, the
registry's lookups) is given to its constructor by the app factory. What a call did comes
back in its `ToolResult` (the sandboxed run, typed, in `execution`) and, from
`ToolRegistry.run`, as a `ToolOutcome` (result, run, deciding rule).

Built-in tools subclass `BuiltinTool` and declare a pydantic `Params` model; its JSON Schema
is what the model and `GET /v1/tools` see. User tools (agent-written) implement `Tool`
directly and validate against their own JSON schema (see `runtime.tools.user`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.audit.records import StateChange
from runtime.errors import InvalidInput, SandboxError
from runtime.policy.decision import Action, Subject
from runtime.sandbox.backend import OutputCallback
from runtime.sandbox.models import Execution

if TYPE_CHECKING:  # the tools' dependencies, typed; imported for real where they are built
    from runtime.executor import Approver, Executor
    from runtime.nodes.base import OpenFiles

ToolGroup = Literal[
    "group:exec",
    "group:fs",
    "group:memory",
    "group:meta",
    "group:cad",
    "group:web",
    "group:remote",
    "group:user_tools",
    "group:mcp",
]
GROUPS: tuple[str, ...] = ToolGroup.__args__  # type: ignore[attr-defined]

TOOL_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"


class ToolParams(BaseModel):
    """Base of every built-in parameter model: unknown arguments are an error, not ignored."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class NoParams(ToolParams):
    """For tools that take no arguments (`{}`)."""


class ImageBlock(BaseModel):
    """An image a tool hands back to the model (carried in `ToolResult.metadata["images"]`)."""

    type: Literal["image"] = "image"
    media_type: Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
    data_b64: str
    path: str


class ToolResult(BaseModel):
    """`{success, output, error, metadata}`: the one shape every tool answers with.

    `execution`: the sandboxed run behind it, typed (set by the tool that ran one:
    `runtime.tools.sandboxed.with_run`); `rule`: the policy rule that allowed that run."""

    success: bool
    output: str = ""
    error: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    execution: Execution | None = None
    rule: str | None = None

    @classmethod
    def ok(cls, output: str = "", **metadata: Any) -> ToolResult:
        return cls(success=True, output=output, metadata=metadata)

    @classmethod
    def fail(cls, error: str, output: str = "", **metadata: Any) -> ToolResult:
        return cls(success=False, output=output, error=error, metadata=metadata)


class ToolSpec(BaseModel):
    """The public description of a tool: what `GET /v1/tools` lists and the LLM is shown."""

    name: str
    description: str
    group: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class CallOrigin:
    """Where a call comes from, as its events say: an agent turn's step and call id."""

    turn_id: str | None = None
    call_id: str | None = None
    iteration: int | None = None


@dataclass(frozen=True)
class ToolOutcome:
    """What `ToolRegistry.run` answers: the tool's result, the sandboxed run behind it (if
    any) and the policy rule that allowed the call."""

    result: ToolResult
    execution: Execution | None
    rule: str | None


@dataclass(frozen=True)
class ToolContext:
    """Everything one call needs: who asks, where its files are, how to run code.

    - `workspace`: the session's files on its node (`runtime.nodes.OpenFiles`: locally
      the `runtime.workspace.Workspace`; host-side file access);
      `workspace_path`: its host directory, mounted as the sandbox's working directory;
      `tmp_path`: the session's tmp directory, mounted at /tmp with it (None: a tmpfs);
      `open_tmp`: opens that directory's files like `workspace` (the caller closes them;
      None: the call has no persistent /tmp).
    - `executor`: the `runtime.executor.Executor`; every sandboxed run and every policy
      check of a tool that runs no code goes through it (so denials are audited).
    - `on_output`: receives live output chunks of a sandboxed run.
    - `timeout_s`: the caller's requested timeout (the policy clamps it).
    - `exec_id`: the id to give the execution (so events can name it before it starts).
    - `approver`: per-call `async (subject, action, decision) -> bool` for a policy `ask`.
    - `origin`: the agent turn and call this call belongs to (`spawn_agent` links to it).
    - `rule`: the rule that allowed a tool that runs no code (`ToolRegistry.run` decides it
      and hands the tool a copy with it; `record_change` audits it).
    """

    subject: Subject
    workspace: OpenFiles | None = None
    workspace_path: Path | None = None
    tmp_path: Path | None = None
    open_tmp: Callable[[], OpenFiles | None] | None = None
    executor: Executor | None = None
    on_output: OutputCallback | None = None
    timeout_s: float | None = None
    exec_id: str | None = None
    approver: Approver | None = None
    origin: CallOrigin = CallOrigin()
    rule: str | None = None

    @property
    def tenant(self) -> str:
        return self.subject.tenant

    @property
    def session(self) -> str:
        return self.subject.session


async def record_change(ctx: ToolContext, action: StateChange, obj: str, **fields: Any) -> None:
    """Audit a state change a tool is about to make (``Executor.record_action``), before it
    makes it; raises ``AuditUnavailable`` (the change must not happen) when that fails, and
    ``SandboxError`` without an Executor: no change goes unrecorded."""
    if ctx.executor is None:
        raise SandboxError(f"no executor to record {action} of {obj!r}: nothing changes")
    await ctx.executor.record_action(ctx.subject, action, obj,
                                     rule=ctx.rule or "none", **fields)


class Tool(ABC):
    """A callable capability. Subclasses set `name`, `description`, `group`."""

    name: str
    description: str
    group: str
    runs_in_sandbox: ClassVar[bool] = False
    """True when `execute` goes through the Executor (which asks the policy and audits)."""

    @abstractmethod
    def parameters_schema(self) -> dict[str, Any]:
        """JSON Schema (type object) of the arguments."""

    @abstractmethod
    def validate(self, args: Any) -> Any:
        """Check `args`; return the validated form or raise `InvalidInput`."""

    @abstractmethod
    async def execute(self, params: Any, ctx: ToolContext) -> ToolResult:
        """Run with validated `params` (from `validate`)."""

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            group=self.group,
            parameters=self.parameters_schema(),
        )

    def probe_args(self) -> list[dict[str, Any]]:
        """Argument sets the registry asks the policy about to decide whether to list the tool
        (listed when any is not denied); e.g. `code_exec` probes each language."""
        return [{}]

    def action(self, args: dict[str, Any], ctx: ToolContext) -> Action:
        """The Action the policy engine is asked about for this call."""
        return Action(tool=self.name, args=args, group=self.group, timeout_s=ctx.timeout_s)


P = TypeVar("P", bound=ToolParams)


class BuiltinTool(Tool, Generic[P]):
    """A tool shipped with the runtime, arguments described by a pydantic `Params` model
    (`P`: the model `execute` receives; `Params` must be it)."""

    Params: ClassVar[type[ToolParams]] = NoParams

    @abstractmethod
    async def execute(self, params: P, ctx: ToolContext) -> ToolResult:
        """Run with the validated arguments."""

    def parameters_schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = clean_schema(self.Params.model_json_schema())
        schema.pop("description", None)  # a model's docstring is for us, not for the LLM
        return schema

    def validate(self, args: Any) -> ToolParams:
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise InvalidInput(f"{self.name}: arguments must be a JSON object")
        try:
            return self.Params.model_validate(args)
        except ValidationError as exc:
            raise InvalidInput(
                f"{self.name}: invalid arguments: {format_validation_error(exc)}",
                tool=self.name,
            ) from None


def format_validation_error(exc: ValidationError, limit: int = 5) -> str:
    """One line per problem, `field: message`, without pydantic's URLs or input echo."""
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(arguments)"
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unknown argument"
        elif err.get("type") == "missing":
            msg = "required argument missing"
        parts.append(f"{loc}: {msg}")
    more = len(exc.errors()) - limit
    if more > 0:
        parts.append(f"(+{more} more)")
    return "; ".join(parts)


# Keywords whose value is a map of *names* to schemas: their keys are not keywords.
_NAME_MAPS = {"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"}
_DATA_KEYWORDS = {"default", "examples", "enum", "const"}


def clean_schema(schema: Any, *, in_name_map: bool = False) -> Any:
    """Drop pydantic's auto-generated `title`s: noise for a small model, not information."""
    if isinstance(schema, list):
        return [clean_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if not in_name_map and key == "title":
            continue
        if in_name_map:
            out[key] = clean_schema(value)
        elif key in _DATA_KEYWORDS:
            out[key] = value
        else:
            out[key] = clean_schema(value, in_name_map=key in _NAME_MAPS)
    return out
