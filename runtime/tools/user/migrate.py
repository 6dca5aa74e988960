"""Rename tenant tools whose name a newer built-in tool took (`navi tools migrate`, and at
every start of the tool layer, with a warning naming them).

A release can add a built-in (`grep`, `tree`, `browser`, ...) whose name a tenant already
gave one of its own tools. Silently letting the built-in win would change what that name
does for the tenant; letting the tenant's tool keep it would let tenant code run under a
built-in's name (and its policy group). So the tenant's tool is renamed first, to
``<name>_user`` (or ``<name>_user2``, ...): its file and the ``name`` literal in it, its
recorded hash and its enabled state move together, and only then does the built-in answer
to the name. A rename changes the file's SHA-256: a policy rule pinning the old
``tool_hash`` no longer matches it (the warning and the CLI say so).

Each rename is returned as a `Renamed` so the caller can audit it (`tool.write` of the new
name, `tool.delete` of the old one) and say it.
"""

from __future__ import annotations

import ast
import asyncio
import os

from pydantic import BaseModel, ConfigDict

from runtime.audit.records import AuditEntry
from runtime.audit.store import AuditLog
from runtime.errors import NaviError
from runtime.logging import get_logger
from runtime.tools.user.descriptor import MAX_TOOL_BYTES, ToolLoadError, content_hash
from runtime.tools.user.objects import OBJECTS_DIR
from runtime.tools.user.store import (
    ENABLED_FILE,
    HASHES_FILE,
    UserToolStore,
    _dump,
    _open_dir,
    _read_at,
    _read_json_map,
    _write_at,
    check_tenant,
)

SUFFIX = "_user"
log = get_logger(__name__)


class Renamed(BaseModel):
    """One tenant tool renamed (or, in a dry run, that would be)."""

    model_config = ConfigDict(frozen=True)

    tenant: str
    old: str
    new: str
    old_sha256: str
    new_sha256: str


class Stuck(BaseModel):
    """A clash that could not be migrated, and why (the tool keeps not loading)."""

    model_config = ConfigDict(frozen=True)

    tenant: str
    name: str
    reason: str


class Migration(BaseModel):
    renamed: list[Renamed] = []
    stuck: list[Stuck] = []


def renamed_source(source: bytes, old: str, new: str) -> bytes:
    """``source`` with its module-level ``name = "<old>"`` literal replaced by ``new``
    (only that literal's characters change)."""
    text = source.decode("utf-8")
    tree = ast.parse(text, filename="<user tool>", mode="exec")
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "name"
                                                  for t in node.targets)
                and isinstance(node.value, ast.Constant) and node.value.value == old
                and node.value.lineno == node.value.end_lineno):
            lines = text.splitlines(keepends=True)
            row = node.value.lineno - 1
            line = lines[row].encode("utf-8")  # ast offsets count UTF-8 bytes
            start, end = node.value.col_offset, node.value.end_col_offset or 0
            lines[row] = (line[:start] + f'"{new}"'.encode() + line[end:]).decode("utf-8")
            return "".join(lines).encode("utf-8")
    raise ToolLoadError(f"no one-line `name = {old!r}` literal to rename")


def _free_name(old: str, taken: set[str]) -> str:
    base = old[: 64 - len(SUFFIX) - 2]
    for n in range(1, 100):
        candidate = f"{base}{SUFFIX}{n if n > 1 else ''}"
        if candidate not in taken:
            return candidate
    raise ToolLoadError("no free name to rename it to")


def migrate(store: UserToolStore, *, dry_run: bool = False) -> Migration:
    """Rename every tenant tool whose name is a built-in's (``store.reserved``)."""
    result = Migration()
    shipped = _shipped(store)
    for name in sorted(shipped & store.reserved):
        result.stuck.append(Stuck(tenant="(shipped)", name=name, reason=(
            "a shipped tool: rename it in the tools directory")))
    if not store.root.is_dir():
        return result
    for tenant in sorted(os.listdir(store.root)):
        if tenant == OBJECTS_DIR:
            continue
        try:
            check_tenant(tenant)
            dir_fd = _open_dir(store.tenant_dir(tenant))
        except (NaviError, OSError):
            continue
        try:
            _migrate_tenant(store, tenant, dir_fd, result, dry_run)
        finally:
            os.close(dir_fd)
    return result


def _migrate_tenant(store: UserToolStore, tenant: str, dir_fd: int, result: Migration,
                    dry_run: bool) -> None:
    files = {n[:-3] for n in os.listdir(dir_fd) if n.endswith(".py")}
    clashes = sorted(files & store.reserved)
    if not clashes:
        return
    taken = files | set(store.reserved) | _shipped(store)
    with store._lock:
        hashes = _read_json_map(dir_fd, HASHES_FILE)
        enabled = _read_json_map(dir_fd, ENABLED_FILE)
        for old in clashes:
            try:
                source = _read_at(dir_fd, f"{old}.py", MAX_TOOL_BYTES)
                recorded = hashes.get(old)
                if not isinstance(recorded, dict) or recorded.get("sha256") != content_hash(
                        source):
                    raise ToolLoadError("its content does not match the hash write_tool "
                                        "recorded; not renamed")
                new = _free_name(old, taken)
                updated = renamed_source(source, old, new)
            except (ToolLoadError, OSError, SyntaxError, UnicodeDecodeError) as exc:
                reason = exc.message if isinstance(exc, ToolLoadError) else str(exc)
                result.stuck.append(Stuck(tenant=tenant, name=old, reason=reason))
                continue
            taken.add(new)
            done = Renamed(tenant=tenant, old=old, new=new, old_sha256=content_hash(source),
                           new_sha256=content_hash(updated))
            result.renamed.append(done)
            if dry_run:
                continue
            _write_at(dir_fd, f"{new}.py", updated)
            hashes[new] = {**recorded, "sha256": done.new_sha256, "size": len(updated),
                           "renamed_from": old}
            hashes.pop(old, None)
            enabled[new] = enabled.pop(old, False) is True
            _write_at(dir_fd, HASHES_FILE, _dump(hashes), 0o600)
            _write_at(dir_fd, ENABLED_FILE, _dump(enabled), 0o600)
            os.unlink(f"{old}.py", dir_fd=dir_fd)
            os.fsync(dir_fd)


def _shipped(store: UserToolStore) -> set[str]:
    directory = store.shipped_dir
    if directory is None or not directory.is_dir():
        return set()
    return {n[:-3] for n in os.listdir(directory) if n.endswith(".py")}


def audit_entries(renamed: Renamed, *, user: str, rule: str) -> list[AuditEntry]:
    """What a rename records: the new name written, the old one deleted."""
    why = f"renamed {renamed.old} -> {renamed.new}: a built-in tool took the name"
    return [AuditEntry(kind="action", action="tool.write", object=renamed.new,
                       tenant=renamed.tenant, user=user, session="none", decision="allow",
                       rule=rule, detail=why, tool_hash=renamed.new_sha256),
            AuditEntry(kind="action", action="tool.delete", object=renamed.old,
                       tenant=renamed.tenant, user=user, session="none", decision="allow",
                       rule=rule, detail=why, tool_hash=renamed.old_sha256)]


def describe(renamed: Renamed) -> str:
    return f"{renamed.tenant}: {renamed.old} -> {renamed.new}"


async def migrate_at_start(store: UserToolStore, audit: AuditLog) -> Migration:
    """The server's start: audit each rename first (no record, no rename), rename, and
    warn naming every renamed tool and every clash left."""
    plan = await asyncio.to_thread(migrate, store, dry_run=True)
    for renamed in plan.renamed:
        for entry in audit_entries(renamed, user="server", rule="tools.migrate"):
            await audit.append(entry)
    result = await asyncio.to_thread(migrate, store) if plan.renamed else plan
    if result.renamed:
        log.warning("user_tools_renamed", renamed=[describe(r) for r in result.renamed],
                    why="built-in tools now have these names; policy tool_hash pins of the "
                        "renamed files no longer match")
    if result.stuck:
        log.warning("user_tools_name_clash",
                    stuck=[f"{s.tenant}: {s.name} ({s.reason})" for s in result.stuck])
    return result
