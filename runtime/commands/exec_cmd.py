"""`navi exec`: run one tool call locally through the same policy, Executor, audit and sandbox.

    navi exec --tool code_exec --arg language=python --arg code='print(1)' [--json]

Nothing takes a shortcut: the call goes through the same call service as the API
(`runtime.calls.SessionToolCall`, with a CLI subject: user and session ``cli``), so it is
validated by the tool, decided by the policy file, written to the audit log of the data dir
(intent before the container starts, outcome after) and run by the Docker backend in a
fresh hardened container. Output streams live (stdout to stdout, stderr to
stderr) unless ``--json``, which prints the exec result's fields once it is done.

Exit status mirrors the program's exit code; otherwise: 124 timed out, 137 killed for
memory, 126 policy denied (the rule is printed), 75 quota exceeded, 74 audit unavailable
(nothing ran), 69 the sandbox broke (engine or image missing), 2 bad arguments or policy.

``--workspace DIR`` mounts DIR read-write as the working directory. The sandbox user
(65534) is given ownership of DIR, and DIR's parent is used as the workspaces root without
the nosuid,nodev remount the server applies to its own root (suid bits and device nodes
stay inert: the sandbox has no capabilities and ``no-new-privileges``).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn, cast

import typer

from runtime.audit.store import AuditLog
from runtime.calls import CallRequest, SessionToolCall
from runtime.calls.local import WorkspaceDir
from runtime.commands.policy import parse_args
from runtime.config import Settings
from runtime.errors import (
    AuditUnavailable,
    ConfigError,
    InvalidInput,
    NaviError,
    PolicyDenied,
    QuotaExceeded,
    SandboxError,
)
from runtime.events import EventHub, SessionEventBus
from runtime.executor import Executor
from runtime.logging import configure_logging, escape_control
from runtime.metrics import Metrics
from runtime.policy import Action, Decision, PolicyEngine, Subject, load_policy
from runtime.policy.decision import Role
from runtime.sandbox.backend import OutputCallback, SandboxBackend
from runtime.sandbox.models import Execution, OutputChunk
from runtime.store.ids import TenantId, TenantName
from runtime.tools.base import ToolResult
from runtime.tools.builtin.exec import CodeExecTool, TerminalTool
from runtime.tools.registry import ToolRegistry

EXIT_TIMEOUT, EXIT_OOM, EXIT_DENIED, EXIT_QUOTA, EXIT_AUDIT, EXIT_SANDBOX, EXIT_USAGE = (
    124, 137, 126, 75, 74, 69, 2)


def _exit_code(result: Execution) -> int:
    if result.timed_out:
        return EXIT_TIMEOUT
    if result.oom_killed:
        return EXIT_OOM
    if result.exit_code is None:
        return 1
    return result.exit_code if 0 <= result.exit_code <= 255 else 1


def _backend(settings: Settings, workspace: Path | None) -> SandboxBackend:
    from runtime.sandbox.docker.backend import DockerBackend

    if workspace is None:
        return DockerBackend.from_settings(settings)
    return DockerBackend.from_settings(settings, workspaces_root=workspace.parent,
                                       harden_workspaces_root=False)


async def _tty_approver(subject: Subject, action: Action, decision: Decision) -> bool:
    prompt = (f"policy asks for approval ({decision.rule}): {decision.reason}. Run "
              f"{action.tool}?")
    return await asyncio.to_thread(typer.confirm, escape_control(prompt), default=False, err=True)


async def _write(chunk: OutputChunk) -> None:
    stream = sys.stdout.buffer if chunk.stream == "stdout" else sys.stderr.buffer
    stream.write(chunk.data)
    stream.flush()


async def run_exec(
    settings: Settings, engine: PolicyEngine, subject: Subject, action: Action,
    workspace: Path | None, *, stream: bool, interactive: bool,
) -> ToolResult:
    """One call through `SessionToolCall` (registry, policy, Executor, audit, DockerBackend)
    with the exec tools; raises the runtime's errors.

    A tool `navi exec` cannot run is still put to the policy first, so a denied tool is
    reported (and audited) as the denial it is.
    """
    registry = ToolRegistry([CodeExecTool(), TerminalTool()], policy=engine)
    backend = _backend(settings, workspace)
    approver = _tty_approver if interactive else None

    def output_to(bus: SessionEventBus, exec_id: str) -> OutputCallback | None:
        return _write if stream else None

    try:
        async with AuditLog(settings.data_dir) as audit:
            executor = Executor(
                engine=engine, backend=backend, audit=audit,
                resolve_image=lambda name: f"{settings.image_prefix}/{name}:latest")
            if action.tool not in registry.builtin_names():
                await executor.authorize(subject, action)
                runs = " and ".join(sorted(registry.builtin_names()))
                raise InvalidInput(f"navi exec runs {runs} only, not {action.tool!r}",
                                   tool=action.tool)
            calls = SessionToolCall(
                registry=registry, executor=executor, workspaces=WorkspaceDir(workspace),
                hub=EventHub(), metrics=Metrics(), approver_for=lambda bus: approver,
                output_to=output_to)
            return await calls(subject, CallRequest(tool=action.tool, args=action.args,
                                                    timeout_s=action.timeout_s))
    finally:
        await backend.close()


def exec_command(
    tool: Annotated[str, typer.Option("--tool", help="code_exec or terminal.")],
    arg: Annotated[list[str] | None, typer.Option(
        "--arg", help="Tool argument KEY=VALUE (or KEY:=JSON); repeat for each.")] = None,
    workspace: Annotated[Path | None, typer.Option(
        "--workspace", help="Directory mounted read-write as the working directory.")] = None,
    timeout: Annotated[float | None, typer.Option(
        "--timeout", help="Timeout in seconds (the policy clamps it).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the exec result as JSON.")] = False,
    data_dir: Annotated[Path | None, typer.Option(
        "--data-dir", help="Data directory (audit log, keys); default NAVI_DATA_DIR.")] = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", help="Policy file; default NAVI_POLICY (policies/default.yaml).")] = None,
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant to run as.")] = "local",
    profile: Annotated[str | None, typer.Option(
        "--profile", help="Profile (default: the tenant's default).")] = None,
    role: Annotated[str, typer.Option("--role", help="user | admin | auditor")] = "user",
) -> None:
    """Run one tool call locally through the policy, the Executor, the audit log and Docker."""
    overrides: dict[str, Any] = {}
    if data_dir is not None:
        overrides["data_dir"] = data_dir
    if policy is not None:
        overrides["policy"] = policy
    settings = Settings(**overrides)
    configure_logging(settings.log_format, "warning")
    if role not in ("user", "tenant_admin", "admin", "auditor"):
        raise typer.BadParameter("must be user, tenant_admin, admin or auditor",
                                 param_hint="--role")
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise typer.BadParameter("must be a positive number of seconds", param_hint="--timeout")
    if workspace is not None:
        workspace = Path(os.path.realpath(workspace))
        if not workspace.is_dir():
            raise typer.BadParameter("not a directory", param_hint="--workspace")
    args = parse_args(arg or [])
    try:
        engine = PolicyEngine(load_policy(settings.policy))
        subject = Subject(tenant=TenantId(tenant), role=cast(Role, role), user="cli",
                          session="cli",
                          profile=profile or engine.default_profile(TenantName(tenant))
                          or "developer")
        action = Action(tool=tool, args=args, timeout_s=timeout)
        interactive = not as_json and sys.stdin.isatty()
        result = asyncio.run(run_exec(settings, engine, subject, action, workspace,
                                      stream=not as_json, interactive=interactive))
    except NaviError as exc:
        _fail(exc, as_json)
    r = result.execution
    assert r is not None  # the exec tools always run (or raise)
    if as_json:
        typer.echo(json.dumps({**r.model_dump(), "rule": result.rule}))
    else:
        status = ("timed out" if r.timed_out else "out of memory" if r.oom_killed
                  else f"exit {r.exit_code}")
        typer.echo(f"[{r.exec_id}: {status} in {r.duration_ms} ms (timeout "
                   f"{r.timeout_s or 0:g} s), audit seq {r.audit_seq}"
                   f"{', output truncated' if r.truncated else ''}]", err=True)
    raise typer.Exit(_exit_code(r))


def _fail(exc: NaviError, as_json: bool) -> NoReturn:
    if isinstance(exc, PolicyDenied):
        code, text = EXIT_DENIED, f"denied by policy rule {exc.rule}: {exc.message}"
    elif isinstance(exc, QuotaExceeded):
        code, text = EXIT_QUOTA, f"quota exceeded (retry after {exc.retry_after} s): {exc.message}"
    elif isinstance(exc, AuditUnavailable):
        code, text = EXIT_AUDIT, f"audit log unavailable, nothing ran: {exc.message}"
    elif isinstance(exc, SandboxError):
        code, text = EXIT_SANDBOX, f"sandbox error ({exc.code}): {exc.message}"
    elif isinstance(exc, InvalidInput | ConfigError):
        code, text = EXIT_USAGE, exc.message
        if hasattr(exc, "render"):
            text = exc.render()
    else:
        code, text = 1, exc.message
    if as_json:
        body = {"code": exc.code, "message": exc.message,
                **{k: v for k, v in exc.details.items() if isinstance(v, str | int | float)}}
        typer.echo(json.dumps({"error": body}))
    else:
        for line in text.splitlines() or [""]:
            typer.echo(f"navi exec: {escape_control(line)}", err=True)
    raise typer.Exit(code)
