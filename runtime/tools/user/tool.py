"""A loaded user tool as a `Tool`: validated by its own JSON schema, run by the runner shim.

The supervisor never imports the file. A call reads the file's bytes, verified to hash to
what was loaded; once the Executor has admitted it (quota, policy, approval), it mounts an
immutable copy of those bytes named by that hash, counted in the tenant's disk quota
(``UserToolStore.acquire``; released when the run ends), and the Executor runs
`python3 -I /opt/navi/runner.py` in the tools-runner image with the copy bind-mounted
read-only at `/opt/navi/tool.py`, its hash as the runner's argument (the runner refuses
other bytes and executes exactly the bytes it hashed, and reports the hash), the params
as JSON on stdin and the session workspace as the working directory. The runner's single
stdout line `{ok, result}` / `{ok: false, error}` becomes the `ToolResult`;
the tool's own prints arrive on stderr (streamed live and kept in the metadata).

The Action carries the file's SHA-256 (`tool_hash`) so the audit records exactly which code
ran and the policy can ask for approval when it changes.
"""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path
from typing import Any, ClassVar

from runtime.errors import InvalidInput
from runtime.policy.decision import Action, Decision
from runtime.sandbox.models import Mount
from runtime.tools.base import Tool, ToolContext, ToolResult
from runtime.tools.sandboxed import ExecOutcome, Invocation, exec_metadata, run_sandboxed, with_run
from runtime.tools.user.descriptor import validate_params
from runtime.tools.user.store import LoadedUserTool, UserToolStore

TOOL_MOUNT = "/opt/navi/tool.py"
RUNNER_ARGV = ["python3", "-I", "-B", "/opt/navi/runner.py"]
MAX_PARAMS_BYTES = 1024 * 1024
MiB = 1024 * 1024
USER_TOOLS_GROUP = "group:user_tools"


def runner_call(tool: LoadedUserTool, params: dict[str, Any], source: Path) -> Invocation:
    """What the Executor runs for one call of `tool` (image chosen by the policy):
    ``source`` is the content-addressed copy of its file."""
    stdin = json.dumps(params, ensure_ascii=False).encode("utf-8")
    return Invocation(
        argv=[*RUNNER_ARGV, tool.descriptor.sha256],
        stdin=stdin,
        mounts=[Mount(source=source, target=TOOL_MOUNT, read_only=True)],
    )


def runner_reported_hash(stdout: bytes) -> str | None:
    """The SHA-256 the runner says it executed (None if it said nothing usable)."""
    try:
        value = json.loads(stdout.decode("utf-8", errors="replace").strip() or "null")
    except ValueError:
        return None
    digest = value.get("sha256") if isinstance(value, dict) else None
    return digest if isinstance(digest, str) else None


def parse_runner_output(stdout: bytes) -> tuple[bool, str]:
    """(ok, result-or-error) from the runner's one JSON line; malformed output is an error."""
    text = stdout.decode("utf-8", errors="replace").strip()
    if not text:
        return False, "the tool produced no result (it exited before the runner could answer)"
    if "\n" in text:
        return False, "the runner's output is malformed (more than one line on stdout)"
    try:
        value = json.loads(text)
    except ValueError:
        return False, "the runner's output is not JSON (result too large or output cut off?)"
    if not isinstance(value, dict) or not isinstance(value.get("ok"), bool):
        return False, "the runner's output is malformed"
    if value["ok"]:
        result = value.get("result")
        return True, result if isinstance(result, str) else json.dumps(result)
    error = value.get("error")
    return False, error if isinstance(error, str) else "the tool failed"


class UserTool(Tool):
    runs_in_sandbox: ClassVar[bool] = True

    def __init__(self, loaded: LoadedUserTool, store: UserToolStore) -> None:
        self.loaded = loaded
        self.store = store
        self.name = loaded.descriptor.name
        self.description = loaded.descriptor.description
        self.group = USER_TOOLS_GROUP

    @property
    def sha256(self) -> str:
        return self.loaded.descriptor.sha256

    def parameters_schema(self) -> dict[str, Any]:
        return self.loaded.descriptor.parameters

    def validate(self, args: Any) -> dict[str, Any]:
        params = validate_params(self.loaded.descriptor, args)
        if len(json.dumps(params, ensure_ascii=False).encode("utf-8")) > MAX_PARAMS_BYTES:
            raise InvalidInput(f"{self.name}: arguments larger than {MAX_PARAMS_BYTES} bytes")
        return params

    def action(self, args: dict[str, Any], ctx: ToolContext) -> Action:
        return Action(
            tool=self.name, args=args, group=self.group, timeout_s=ctx.timeout_s,
            tool_hash=self.sha256,
        )

    async def execute(self, params: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await run_user_tool(self.loaded, self.store, params, ctx, self.action(params, ctx))


async def run_user_tool(
    loaded: LoadedUserTool,
    store: UserToolStore,
    params: dict[str, Any],
    ctx: ToolContext,
    action: Action,
) -> ToolResult:
    """Run one user tool call in the sandbox (shared by the tool itself and `test_tool`)."""
    # refuses a file changed since load; these bytes (what an approval's hash names, even
    # if write_tool replaces the file while it is pending) are what will run
    source = await asyncio.to_thread(store.read_verified, loaded)
    copies: list[Path] = []

    async def admitted(decision: Decision) -> Invocation:
        # after admission only: a copy past the tenant's disk quota is refused; what is
        # mounted is this copy, named by its hash
        limit = 0 if ctx.executor is None else \
            ctx.executor.engine.quotas(ctx.subject.policy_tenant).tenant_disk_mb * MiB
        copy = await asyncio.to_thread(store.acquire, ctx.tenant, source,
                                       functools.partial(store.admit_copy, limit=limit))
        copies.append(copy)
        return runner_call(loaded, params, copy)

    try:
        outcome = await run_sandboxed(ctx, action, admitted)
    finally:
        for copy in copies:  # the run has ended (or never started): drop the reference
            await asyncio.shield(asyncio.to_thread(store.release, ctx.tenant, copy))
    return with_run(_answer(loaded, outcome), outcome)


def _answer(loaded: LoadedUserTool, outcome: ExecOutcome) -> ToolResult:
    res = outcome.result
    stderr = res.stderr.decode("utf-8", errors="replace")
    meta = exec_metadata(outcome)
    meta["tool_hash"] = loaded.descriptor.sha256
    meta["ran_sha256"] = runner_reported_hash(res.stdout)
    if res.timed_out:
        return ToolResult.fail(f"{loaded.descriptor.name} timed out", output=stderr, **meta)
    if res.oom_killed:
        return ToolResult.fail(f"{loaded.descriptor.name} ran out of memory", output=stderr,
                               **meta)
    ok, text = parse_runner_output(res.stdout)
    if ok and res.exit_code == 0:
        return ToolResult.ok(text, **meta)
    if ok:
        text = f"runner exited with code {res.exit_code}"
    return ToolResult.fail(text, output=stderr, **meta)


def user_tool_manual(loaded: LoadedUserTool) -> str:
    d = loaded.descriptor
    schema = json.dumps(d.parameters, indent=2, ensure_ascii=False)
    state = "enabled" if loaded.enabled else "disabled"
    return (
        f"# {d.name} (user tool, {loaded.origin}, {state})\n\n{d.description}\n\n"
        f"## Parameters (JSON Schema)\n\n```json\n{schema}\n```\n\n"
        "## Limits\n\nRuns in the tools-runner sandbox (python3 standard library only, no "
        "network, read-only root, the session workspace as working directory). The result is "
        "the string `execute(params)` returns.\n\n"
        f"Content SHA-256: `{d.sha256}`\n"
    )
