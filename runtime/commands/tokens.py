"""`navi tokens`: mint, list and revoke bearer tokens straight in the store (no server needed).

`create` makes the tenant when it does not exist (and says so), then prints the token exactly
once: alone on stdout (so ``TOKEN=$(navi tokens create ...)`` works) or, with ``--json``, as
one JSON object. Only its SHA-256 digest is stored.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any, cast

import typer

from runtime.config import Settings
from runtime.errors import NaviError, NotFound
from runtime.logging import configure_logging
from runtime.store import ROLES, Role, Store, Tenant, is_tenant_id

app = typer.Typer(help="Create, list and revoke API tokens.", no_args_is_help=True)

DataDirOpt = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Data directory (default: NAVI_DATA_DIR or ./data)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def _database(data_dir: Path | None) -> Path:
    settings = Settings() if data_dir is None else Settings(data_dir=data_dir)
    configure_logging(settings.log_format, "warning")
    return settings.database_path


def _run(coro: Any) -> Any:
    try:
        return asyncio.run(coro)
    except NaviError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(2) from None


async def _find_tenant(store: Store, tenant: str) -> Tenant | None:
    if is_tenant_id(tenant):
        found = await store.get_tenant(tenant)
        if found is not None:
            return found
    return await store.get_tenant_by_name(tenant)


@app.command("create")
def create(
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant name (or id); created if new.")],
    role: Annotated[str, typer.Option("--role", help=f"One of: {', '.join(ROLES)}.")],
    data_dir: DataDirOpt = None,
    label: Annotated[str | None, typer.Option("--label", help="Free-text note.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a token for TENANT with ROLE and print it once."""
    if role not in ROLES:
        typer.echo(f"error: --role must be one of {', '.join(ROLES)}", err=True)
        raise typer.Exit(2)
    path = _database(data_dir)

    async def go() -> dict[str, Any]:
        async with await Store.open(path) as store:
            found = await _find_tenant(store, tenant)
            created = found is None
            target = found or await store.create_tenant(tenant)
            plaintext, record = await store.create_token(target.id, cast(Role, role), label)
            return {"token": plaintext, "id": record.id, "role": record.role,
                    "tenant_id": target.id, "tenant": target.name, "label": record.label,
                    "tenant_created": created}

    out = _run(go())
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
    path = _database(data_dir)

    async def go() -> list[dict[str, Any]]:
        async with await Store.open(path) as store:
            found = await _find_tenant(store, tenant)
            if found is None:
                raise NotFound(f"no tenant {tenant!r}")
            return [r.model_dump() for r in await store.list_tokens(found.id)]

    rows = _run(go())
    if as_json:
        typer.echo(json.dumps(rows))
        return
    for r in rows:
        state = "revoked" if r["revoked_at"] is not None else "live"
        typer.echo(f"{r['id']}  {r['role']:<7}  {state:<7}  {r['label'] or ''}")


@app.command("revoke")
def revoke(
    token_id: Annotated[str, typer.Argument(help="Token id (k_...).")],
    data_dir: DataDirOpt = None,
) -> None:
    """Revoke a token by id."""
    path = _database(data_dir)

    async def go() -> bool:
        async with await Store.open(path) as store:
            return await store.revoke_token(token_id)

    if not _run(go()):
        typer.echo(f"error: no live token {token_id!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {token_id}", err=True)

