"""`navi tools migrate`: rename tenant tools whose name a built-in tool now has.

The server does the same at every start (with a warning naming them); this command lets an
operator see (`--dry-run`) and make the renames on a stopped server's data dir first. Each
rename is audited before it is made (`tool.write` of the new name, `tool.delete` of the old,
user `cli`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from runtime.audit.store import AuditLog
from runtime.commands.store_cli import DataDirOpt, database_path, run
from runtime.tools.user.migrate import audit_entries, describe, migrate
from runtime.tools.user.store import UserToolStore

app = typer.Typer(help="Maintain tenants' user tools.", no_args_is_help=True)


@app.command("migrate")
def migrate_command(
        data_dir: DataDirOpt = None,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be "
                                              "renamed.")] = False) -> None:
    """Rename each tenant tool named like a built-in tool to NAME_user."""
    data = database_path(data_dir).parent
    store = UserToolStore(data)
    plan = migrate(store, dry_run=True)

    async def record() -> None:
        async with AuditLog(data) as audit:
            for renamed in plan.renamed:
                for entry in audit_entries(renamed, user="cli", rule="cli.tools.migrate"):
                    await audit.append(entry)

    if plan.renamed and not dry_run:
        run(record())
        plan = migrate(store)
    verb = "would rename" if dry_run else "renamed"
    for renamed in plan.renamed:
        typer.echo(f"{verb} {describe(renamed)}")
    for stuck in plan.stuck:
        typer.echo(f"not renamed {stuck.tenant}: {stuck.name} ({stuck.reason})")
    if not plan.renamed and not plan.stuck:
        typer.echo("no user tool has a built-in tool's name")
    elif plan.renamed and not dry_run:
        typer.echo("policy rules pinning these tools' tool_hash need the new hashes "
                   "(navi tools migrate changed the name literal in each file)")
