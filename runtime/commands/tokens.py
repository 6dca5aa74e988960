"""`navi tokens`: mint, list and revoke bearer tokens straight in the store (no server needed).

`create` makes the tenant when it does not exist (and says so), then prints the token exactly
once: alone on stdout (so ``TOKEN=$(navi tokens create ...)`` works) or, with ``--json``, as
one JSON object (the API's fields: id, token, role, name, expires_at, plus the tenant). Only
its SHA-256 digest is stored. Roles follow the API: ``admin`` only in the operator tenant
(the first admin token's), ``tenant_admin`` for a tenant's own manager.

Like the API, each create and revoke is audited (``token.create``/``token.revoke``, user
``cli``) before it takes effect; when the audit log cannot be written nothing changes.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from runtime.commands.store_cli import DataDirOpt, audit_change, database_path, find_tenant, run
from runtime.errors import Forbidden, NotFound
from runtime.store import MAX_EXPIRES_IN_S, ROLES, Store, tokens
from runtime.store.ids import new_tenant_id, new_token_id
from runtime.store.store import check_tenant_name

app = typer.Typer(help="Create, list and revoke API tokens.", no_args_is_help=True)

RULE = "cli.tokens"
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


@app.command("create")
def create(
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant name (or id); created if new.")],
    role: Annotated[str, typer.Option("--role", help=f"One of: {', '.join(ROLES)}.")],
    data_dir: DataDirOpt = None,
    name: Annotated[str | None, typer.Option("--name", "--label",
                                             help="What the token is for (free text).")] = None,
    expires_in: Annotated[int | None, typer.Option(
        "--expires-in", min=1, max=MAX_EXPIRES_IN_S,
        help="Seconds until the token stops working (default: never).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a token for TENANT with ROLE and print it once."""
    if role not in ROLES:
        typer.echo(f"error: --role must be one of {', '.join(ROLES)}", err=True)
        raise typer.Exit(2)
    path = database_path(data_dir)

    async def go() -> dict[str, Any]:
        async with await Store.open(path) as store:
            found = await find_tenant(store, tenant)
            created = found is None
            if role == "admin" and await store.operator_tenant() not in (
                    None, found.id if found else None):
                raise Forbidden("role admin exists only in the operator tenant; use "
                                "tenant_admin to manage this tenant")
            if found is None:
                check_tenant_name(tenant)
                tenant_id = new_tenant_id()
                await audit_change(path, tenant_id, "tenant.create", tenant_id,
                                   rule=RULE, detail=f"name: {tenant}")
                found = await store.create_tenant(tenant, tenant_id=tenant_id)
            target = found
            expires_at = tokens.now() + expires_in if expires_in is not None else None
            token_id = new_token_id()
            await audit_change(path, target.id, "token.create", token_id, rule=RULE,
                               detail=f"role: {role}")
            plaintext, record = await store.create_token(
                target.id, role, name, expires_at=expires_at, token_id=token_id)
            return {"token": plaintext, "id": record.id, "role": record.role,
                    "name": record.name, "expires_at": record.expires_at,
                    "tenant_id": target.id, "tenant": target.name, "tenant_created": created}

    out = run(go())
    if as_json:
        typer.echo(json.dumps(out))
        return
    if out["tenant_created"]:
        typer.echo(f"created tenant {out['tenant']} ({out['tenant_id']})", err=True)
    typer.echo(f"token {out['id']} ({out['role']}) for tenant {out['tenant']}; "
               "shown once, store it now:", err=True)
    typer.echo(out["token"])


@app.command("list")
def list_tokens(
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant name or id.")],
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List a tenant's tokens (ids and roles; never the tokens themselves)."""
    path = database_path(data_dir)

    async def go() -> list[dict[str, Any]]:
        async with await Store.open(path) as store:
            found = await find_tenant(store, tenant)
            if found is None:
                raise NotFound(f"no tenant {tenant!r}")
            return [r.model_dump() for r in await store.list_tokens(found.id)]

    rows = run(go())
    if as_json:
        typer.echo(json.dumps(rows))
        return
    for r in rows:
        state = "revoked" if r["revoked_at"] is not None else (
            "expired" if r["expires_at"] is not None and r["expires_at"] <= tokens.now()
            else "live")
        typer.echo(f"{r['id']}  {r['role']:<12}  {state:<7}  {r['name'] or ''}")


@app.command("revoke")
def revoke(
    token_id: Annotated[str, typer.Argument(help="Token id (k_...).")],
    data_dir: DataDirOpt = None,
) -> None:
    """Revoke a token by id."""
    path = database_path(data_dir)

    async def go() -> bool:
        async with await Store.open(path) as store:
            record = await store.get_token(token_id)
            if record is None or record.revoked_at is not None:
                return False
            await audit_change(path, record.tenant_id, "token.revoke", token_id, rule=RULE,
                               detail=f"role: {record.role}")
            return await store.revoke_token(token_id)

    if not run(go()):
        typer.echo(f"error: no live token {token_id!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {token_id}", err=True)

