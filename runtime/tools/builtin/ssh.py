"""`ssh_exec` (group `group:remote`): one command on a lab machine, over ssh from a sandbox.

Nothing of ssh runs in the supervisor. A call is:

1. the arguments checked here (`[user@]host[:port]`, a command without NUL);
2. the policy's decision: the host is part of the `Action` (`hosts`), so a host off the
   rule's egress grant is denied by the engine (`profiles.<p>.tools.ssh_exec.egress`) before
   any container starts; the rule's `ssh` names the key (a tenant secret) and pins the host
   keys;
3. `ssh_driver.py` in a fresh `ssh`-image container (Executor: audit, limits), with the
   call's egress proxy and no session files. The Recorder puts the key ahead of stdin (never
   argv, env, audit or events; the result is redacted of it); ssh reaches the host only
   through a CONNECT tunnel of the proxy and accepts only the pinned host keys.

The key can reach no other code: the engine hands it only to the built-in `ssh_exec`, whose
program is this fixed driver (the model chooses the remote command, which runs on the remote
host, not beside the key); `code_exec`, `terminal` and user tools never get it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator

from runtime.policy.decision import Decision
from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult
from runtime.tools.sandboxed import Invocation, exec_metadata, run_sandboxed, with_run

DRIVER_SOURCE = Path(__file__).with_name("ssh_driver.py").read_text(encoding="utf-8")
STARTUP_S = 5.0  # container start and the handshake's share, on top of the command's timeout
MAX_COMMAND_BYTES = 64 * 1024
_HOST = re.compile(r"^(?:(?P<user>[a-z_][a-z0-9_.-]{0,31})@)?"
                   r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?)"
                   r"(?::(?P<port>[0-9]{1,5}))?$")
# ssh's own words (exit 255) turned into what the caller should know
_SSH_ERRORS = (
    ("REMOTE HOST IDENTIFICATION HAS CHANGED", "host_key_changed",
     "the host's key is not the one the policy pins (a changed host key is refused: if the "
     "machine was reinstalled, an operator updates ssh.known_hosts)"),
    ("No ED25519 host key is known", "host_key_unknown", None),
    ("host key is known for", "host_key_unknown", None),
    ("Host key verification failed", "host_key_unknown",
     "the host's key is not pinned by the policy (ssh.known_hosts): refused"),
    ("the egress proxy refused", "egress_refused", None),
    ("Permission denied", "auth_failed", "the host refused the key"),
    ("no ssh key", "no_key", "no ssh key: the policy's ssh_exec rule names none "
     "(ssh: {key_secret, known_hosts}) or the tenant has no such secret"),
)


class SshExecParams(ToolParams):
    host: str = Field(description="[user@]host[:port] (port 22 by default); a host the "
                                  "policy allows")
    command: str = Field(min_length=1, description="the command line, run by the remote "
                                                   "user's shell")
    timeout_s: float | None = Field(
        None, gt=0, le=3600,
        description="seconds before the command is killed (default: the policy's; above the "
                    "policy's max it is clamped)")

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        match = _HOST.fullmatch(value)
        if match is None or ".." in value:
            raise ValueError("host is [user@]name[:port]: a DNS name or an IPv4 address")
        port = match["port"]
        if port is not None and not 0 < int(port) < 65536:
            raise ValueError("host's port is 1 to 65535")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("command contains a NUL byte")
        if len(value.encode("utf-8", errors="surrogatepass")) > MAX_COMMAND_BYTES:
            raise ValueError(f"command is larger than {MAX_COMMAND_BYTES} bytes")
        return value


def _parts(host: str) -> tuple[str | None, str, int]:
    match = _HOST.fullmatch(host)
    assert match is not None  # checked by the params
    return match["user"], match["name"], int(match["port"] or 22)


class SshExecTool(BuiltinTool[SshExecParams]):
    name = "ssh_exec"
    description = (
        "Run one command on a remote machine over ssh (from a sandbox, through the egress "
        "proxy, with the key and pinned host keys the policy names); returns the command's "
        "stdout, stderr and exit code."
    )
    group = "group:remote"
    Params = SshExecParams
    runs_in_sandbox: ClassVar[bool] = True

    def probe_args(self) -> list[dict[str, Any]]:
        return [{"host": "lab.example", "command": "true"}]

    async def execute(self, params: SshExecParams, ctx: ToolContext) -> ToolResult:
        user, name, port = _parts(params.host)
        action = self.action(params.model_dump(mode="json"), ctx).model_copy(
            update={"hosts": (name,)})
        if params.timeout_s is not None:
            action = action.model_copy(update={"timeout_s": params.timeout_s + STARTUP_S})

        def ssh(decision: Decision) -> Invocation:
            job = {"host": name, "port": port, "user": user or decision.ssh_user or "root",
                   "command": params.command, "known_hosts": list(decision.known_hosts),
                   "timeout_s": max(1.0, decision.limits.timeout_s - STARTUP_S / 2),
                   "driver": DRIVER_SOURCE}
            stdin = json.dumps(job, separators=(",", ":")).encode("utf-8")
            if decision.stdin_secret is None:  # no key granted: the driver says so
                stdin = b"0\n" + stdin
            return Invocation(argv=["python3", "-I", "-c", DRIVER_SOURCE], stdin=stdin)

        bare = dataclasses.replace(ctx, workspace_path=None)  # no session files
        outcome = await run_sandboxed(bare, action, ssh)
        meta = exec_metadata(outcome)
        res = outcome.execution
        meta.update(host=name, port=port)
        if res.exit_code == 255 or res.exit_code == 254:
            for needle, code, message in _SSH_ERRORS:
                if needle in res.stderr:
                    meta["ssh_error"] = code
                    return with_run(ToolResult.fail(
                        f"{code}: {message or res.stderr.strip()[-500:]}",
                        output=res.stderr[-2000:], **meta), outcome)
        output = res.stdout + (f"\n[stderr]\n{res.stderr}" if res.stderr else "")
        if res.timed_out:
            return with_run(ToolResult.fail(f"timed out after {outcome.timeout_s:g} s",
                                            output=output, **meta), outcome)
        if res.exit_code != 0:
            return with_run(ToolResult.fail(f"exit code {res.exit_code}", output=output,
                                            **meta), outcome)
        return with_run(ToolResult.ok(output, **meta), outcome)
