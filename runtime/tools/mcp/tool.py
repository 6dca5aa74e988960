"""One tool of a policy-declared MCP server, as a Navi `Tool` named `SERVER__TOOL`.

A call is an execution like any other: the Executor decides it (group `group:mcp`; the
server's image and egress hosts come from the policy's `mcp_servers` entry), audits it with
the server's hash (image and command) as `tool_hash`, and runs the server in a fresh
hardened container with the session's files as working directory, for this one call.
Arguments are checked against the server's own JSON Schema under `schema_guard`'s bounds
(the server is third-party code; its schema is untrusted input like an agent's).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from runtime.errors import InvalidInput
from runtime.policy.decision import Action
from runtime.policy.model import MCP_GROUP, McpServer
from runtime.tools.base import Tool, ToolContext, ToolResult
from runtime.tools.mcp.protocol import (
    MAX_DESCRIPTION,
    RelayError,
    call_argv,
    relay_answer,
    result_text,
    server_hash,
)
from runtime.tools.sandboxed import ExecOutcome, Invocation, exec_metadata, run_sandboxed, with_run
from runtime.tools.schema_guard import validate_instance

MAX_ARGS_BYTES = 1024 * 1024


class McpTool(Tool):
    runs_in_sandbox: ClassVar[bool] = True

    def __init__(self, name: str, server_name: str, server: McpServer, remote_name: str,
                 description: str, schema: dict[str, Any]) -> None:
        self.name = name
        self.server_name = server_name
        self.server = server
        self.remote_name = remote_name
        self.description = description[:MAX_DESCRIPTION] or f"{remote_name} ({server_name})"
        self.group = MCP_GROUP
        self.schema = schema
        self.server_hash = server_hash(server)

    def parameters_schema(self) -> dict[str, Any]:
        return self.schema

    def validate(self, args: Any) -> dict[str, Any]:
        params = {} if args is None else args
        if not isinstance(params, dict):
            raise InvalidInput(f"{self.name}: arguments must be a JSON object", tool=self.name)
        if len(json.dumps(params, ensure_ascii=False).encode()) > MAX_ARGS_BYTES:
            raise InvalidInput(f"{self.name}: arguments larger than {MAX_ARGS_BYTES} bytes",
                               tool=self.name)
        try:
            problems = validate_instance(self.schema, params)
        except InvalidInput as exc:
            raise type(exc)(f"{self.name}: {exc.message}", tool=self.name) from None
        if problems:
            raise InvalidInput(f"{self.name}: invalid arguments: {'; '.join(problems)}",
                               tool=self.name)
        return params

    def action(self, args: dict[str, Any], ctx: ToolContext) -> Action:
        return Action(tool=self.name, args=args, group=self.group, timeout_s=ctx.timeout_s,
                      tool_hash=self.server_hash)

    def manual(self) -> str:
        schema = json.dumps(self.schema, indent=2, ensure_ascii=False)
        return (
            f"# {self.name} (tool {self.remote_name!r} of MCP server {self.server_name!r})\n\n"
            f"{self.description}\n\n## Parameters (JSON Schema)\n\n```json\n{schema}\n```\n\n"
            f"## Limits\n\nEach call starts the server (`{' '.join(self.server.command)}`) in a "
            f"fresh sandbox of image `{self.server.image}` with the session's files as working "
            "directory; network only to the hosts the policy names for the server.\n\n"
            f"Server SHA-256 (image and command): `{self.server_hash}`\n"
        )

    async def execute(self, params: dict[str, Any], ctx: ToolContext) -> ToolResult:
        invocation = Invocation(argv=call_argv(self.server, self.remote_name),
                                stdin=json.dumps(params, ensure_ascii=False).encode())
        outcome = await run_sandboxed(ctx, self.action(params, ctx), invocation)
        return with_run(self._answer(outcome), outcome)

    def _answer(self, outcome: ExecOutcome) -> ToolResult:
        res = outcome.result
        meta = exec_metadata(outcome)
        meta.update(mcp_server=self.server_name, tool_hash=self.server_hash)
        stderr = res.stderr.decode("utf-8", errors="replace")
        if res.timed_out:
            return ToolResult.fail(f"{self.name} timed out", output=stderr, **meta)
        if res.oom_killed:
            return ToolResult.fail(f"{self.name} ran out of memory", output=stderr, **meta)
        try:
            is_error, text = result_text(relay_answer(res.stdout).get("result"))
        except RelayError as exc:
            return ToolResult.fail(f"{self.name}: {exc}", output=stderr, **meta)
        if is_error:
            return ToolResult.fail(text or f"{self.name} failed", output=stderr, **meta)
        return ToolResult.ok(text, **meta)
