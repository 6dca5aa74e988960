"""What the commands that change a data dir's store directly (no server) share.

`navi tokens` and `navi secrets` open the store themselves, find a tenant by name or id,
and, like the API, write each change to the audit log first (user ``cli``; fail closed:
when the log cannot be written nothing changes). A `NaviError` ends the command with its
message and exit code 2.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from runtime.audit import AuditEntry, AuditLog, StateChange
from runtime.config import Settings
from runtime.errors import NaviError
from runtime.logging import configure_logging, escape_control
from runtime.store import Store, Tenant, is_tenant_id

__all__ = ["DataDirOpt", "audit_change", "cli_errors", "database_path", "find_tenant", "run"]
T = TypeVar("T")

DataDirOpt = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Data directory (default: NAVI_DATA_DIR or ./data)."),
]


def database_path(data_dir: Path | None) -> Path:
    """The store of ``data_dir`` (default: the settings'); logging set up for a command."""
    settings = Settings() if data_dir is None else Settings(data_dir=data_dir)
    configure_logging(settings.log_format, "warning")
    return settings.database_path


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """A `NaviError` inside ends the command: its message (one line) and exit code 2."""
    try:
        yield
    except NaviError as exc:
        typer.echo(f"error: {escape_control(exc.message)}", err=True)
        raise typer.Exit(2) from None


def run(coro: Coroutine[Any, Any, T]) -> T:
    with cli_errors():
        return asyncio.run(coro)


async def find_tenant(store: Store, tenant: str) -> Tenant | None:
    """The tenant with id ``tenant``, else the one named ``tenant``."""
    if is_tenant_id(tenant):
        found = await store.get_tenant(tenant)
        if found is not None:
            return found
    return await store.get_tenant_by_name(tenant)


async def audit_change(database: Path, tenant_id: str, action: StateChange, obj: str, *,
                       rule: str, detail: str | None = None) -> None:
    """Record the change in the data dir's audit log first (fail closed, like the API)."""
    async with AuditLog(database.parent) as audit:
        await audit.append(AuditEntry(
            kind="action", action=action, object=obj, tenant=tenant_id, user="cli",
            session="none", decision="allow", rule=rule, detail=detail))
