"""`navi policy check FILE` and `navi policy explain`: validate a policy, show who decides what.

`check` exits 0 when the file is valid and 2 with every problem as FILE:LINE:COLUMN: path:
message otherwise. `explain` asks the engine exactly as the runtime would and prints the
verdict, the deciding rule, the reason and the effective limits, image and network.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, cast

import typer

from runtime.config import Settings
from runtime.logging import escape_control
from runtime.policy import Action, PolicyEngine, PolicyFileError, Subject, load_policy
from runtime.policy.decision import Role
from runtime.store.ids import TenantId, TenantName

app = typer.Typer(help="Validate policies and explain decisions.", no_args_is_help=True)


def parse_args(pairs: list[str]) -> dict[str, Any]:
    """`key=value` (a string) or `key:=json` (any JSON value), as `navi exec --arg` takes."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        raw_json = key.endswith(":")
        key = key[:-1] if raw_json else key
        if not sep or not key.isidentifier():
            raise typer.BadParameter(f"{pair[:60]!r} is not KEY=VALUE or KEY:=JSON",
                                     param_hint="--arg")
        if raw_json:
            try:
                out[key] = json.loads(value)
            except ValueError:
                raise typer.BadParameter(f"{key}: not valid JSON", param_hint="--arg") from None
        else:
            out[key] = value
    return out


def _load(path: Path) -> PolicyEngine:
    try:
        return PolicyEngine(load_policy(path))
    except PolicyFileError as exc:
        for line in exc.render().splitlines():
            typer.echo(escape_control(line), err=True)
        raise typer.Exit(2) from None


@app.command("check")
def check(file: Annotated[Path, typer.Argument(help="Policy YAML file.")]) -> None:
    """Validate a policy file; problems are printed with file:line:column."""
    engine = _load(file)
    policy = engine.policy
    typer.echo(f"{file}: ok ({len(policy.profiles)} profiles, {len(policy.tenants)} tenant "
               f"entries)")


@app.command("explain")
def explain(
    tool: Annotated[str, typer.Option("--tool", help="Tool name, e.g. code_exec.")],
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant name.")] = "local",
    policy: Annotated[Path | None, typer.Option("--policy", help="Policy file "
                                                "(default: NAVI_POLICY).")] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="Session profile "
                                                "(default: the tenant's).")] = None,
    role: Annotated[str, typer.Option("--role", help="user | admin | auditor")] = "user",
    group: Annotated[str | None, typer.Option("--group", help="user_tools for a user "
                                              "tool")] = None,
    arg: Annotated[list[str] | None, typer.Option("--arg", help="KEY=VALUE tool argument "
                                                  "(e.g. language=bash).")] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Requested timeout "
                                                  "(s).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Print the verdict, the rule that decides, the reason and the effective limits."""
    if role not in ("user", "tenant_admin", "admin", "auditor"):
        raise typer.BadParameter("must be user, tenant_admin, admin or auditor",
                                 param_hint="--role")
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise typer.BadParameter("must be a positive number of seconds", param_hint="--timeout")
    engine = _load(policy or Settings().policy)
    name = TenantName(tenant)  # the CLI's tenant is what policy files match
    chosen = profile or engine.default_profile(name) or "developer"
    subject = Subject(tenant=TenantId(tenant), role=cast(Role, role), profile=chosen, user="cli")
    action = Action(tool=tool, group=group, args=parse_args(arg or []), timeout_s=timeout)
    decision = engine.decide(subject, action)
    quotas = engine.quotas(name)
    found = engine.tenant_rule(name)
    if as_json:
        typer.echo(json.dumps({"subject": subject.model_dump(), "tool": tool,
                               "decision": decision.model_dump(), "quotas": quotas.model_dump()}))
        return
    lim = decision.limits
    lines = [
        ("verdict", decision.verdict),
        ("rule", decision.rule),
        ("reason", decision.reason),
        ("subject", f"tenant {tenant} (policy entry: {found[0] if found else 'none'}), "
                    f"profile {chosen}, role {role}"),
    ]
    if decision.verdict != "deny":
        lines += [
            ("limits", f"timeout {lim.timeout_s:g} s, memory {lim.memory_mb} MiB, pids "
                       f"{lim.pids}, cpus {lim.cpus:g}, /tmp {lim.tmp_mb} MiB, output "
                       f"{lim.output_bytes} B/stream, nofile {lim.nofile}, fsize "
                       f"{lim.fsize_mb} MiB, runtime {lim.runtime}"),
            ("image", decision.image or "(runs no code)"),
            ("network", decision.network + (f" -> {', '.join(decision.egress_allowlist)}"
                                            if decision.egress_allowlist else "")),
        ]
    lines.append(("quotas", f"{quotas.max_concurrent} concurrent, {quotas.execs_per_minute}"
                            f"/min, session disk {quotas.session_disk_mb} MiB, upload "
                            f"{quotas.upload_mb} MiB"))
    for key, value in lines:
        typer.echo(f"{key + ':':9}{escape_control(value)}")

