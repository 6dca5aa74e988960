"""`navi secrets set|list|delete`: a tenant's secrets for tools, on the data dir directly.

The value of `set` is read from stdin (or a hidden prompt), never from the command line
(argv is visible to every local user). Like the API, each change is audited first
(`secret.set` / `secret.delete`, object the name, user `cli`); list shows names only.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from runtime.commands.store_cli import (
    DataDirOpt,
    audit_change,
    cli_errors,
    database_path,
    find_tenant,
    run,
)
from runtime.errors import NotFound
from runtime.store import Store
from runtime.store.secrets import SecretBox, SecretStore, check_secret_name

app = typer.Typer(help="Set, list and delete a tenant's secrets for tools.",
                  no_args_is_help=True)
TenantOpt = Annotated[str, typer.Option("--tenant", help="Tenant name (or id).")]


async def _open(path: Path, tenant: str) -> tuple[Store, SecretStore, str]:
    store = await Store.open(path)
    found = await find_tenant(store, tenant)
    if found is None:
        await store.close()
        raise NotFound(f"no tenant {tenant!r}")
    return store, SecretStore(store, SecretBox.in_data_dir(path.parent)), found.id


@app.command("set")
def set_secret(name: str, tenant: TenantOpt, data_dir: DataDirOpt = None) -> None:
    """Store NAME for TENANT; the value comes from stdin (or a hidden prompt)."""
    with cli_errors():
        check_secret_name(name)
    value = (sys.stdin.read() if not sys.stdin.isatty()
             else typer.prompt("value", hide_input=True)).rstrip("\n")
    path = database_path(data_dir)

    async def go() -> None:
        store, secrets, tenant_id = await _open(path, tenant)
        try:
            await audit_change(path, tenant_id, "secret.set", name, rule="cli.secrets")
            await secrets.set(tenant_id, name, value)
        finally:
            await store.close()
    run(go())
    typer.echo(f"secret {name} set for tenant {tenant}")


@app.command("list")
def list_secrets(tenant: TenantOpt, data_dir: DataDirOpt = None) -> None:
    """The names of TENANT's secrets (values are never shown)."""
    path = database_path(data_dir)

    async def go() -> list[str]:
        store, secrets, tenant_id = await _open(path, tenant)
        try:
            return [s["name"] for s in await secrets.names(tenant_id)]
        finally:
            await store.close()
    for name in run(go()):
        typer.echo(name)


@app.command("delete")
def delete_secret(name: str, tenant: TenantOpt, data_dir: DataDirOpt = None) -> None:
    """Delete NAME of TENANT."""
    with cli_errors():
        check_secret_name(name)
    path = database_path(data_dir)

    async def go() -> None:
        store, secrets, tenant_id = await _open(path, tenant)
        try:
            if name not in {s["name"] for s in await secrets.names(tenant_id)}:
                raise NotFound(f"no secret named {name!r}")
            await audit_change(path, tenant_id, "secret.delete", name, rule="cli.secrets")
            await secrets.delete(tenant_id, name)
        finally:
            await store.close()
    run(go())
    typer.echo(f"secret {name} deleted")
