"""The runtime's SQLite store (``<data_dir>/navi.sqlite3``): tenants, tokens, sessions.

Public API (all coroutines unless noted)::

    store = await Store.open(settings.database_path)      # creates + migrates; WAL; 0600
    await store.close()                                   # or: async with await Store.open(p)

    await store.create_tenant(name) -> Tenant              # Conflict if name taken (NOCASE)
    await store.get_tenant(tenant_id) -> Tenant | None
    await store.get_tenant_by_name(name) -> Tenant | None
    await store.list_tenants() -> list[Tenant]

    await store.create_token(tenant_id, role, name=None, *, expires_at=None, token_id=None)
        -> (plaintext, TokenRecord)          # Forbidden: admin outside the operator tenant
    await store.authenticate(plaintext) -> TokenRecord | None   # None: unknown/revoked/expired
    await store.revoke_token(token_id, tenant_id=None) -> bool
    await store.get_token(token_id, tenant_id=None) / list_tokens(tenant_id)
    await store.operator_tenant() -> str | None  # the first admin token's tenant
    await store.ensure_bootstrap_admin(plaintext) -> TokenRecord  # NAVI_ADMIN_TOKEN

    await store.create_session(tenant_id, profile, title=None) -> SessionRecord
    await store.get_session(tenant_id, session_id) -> SessionRecord | None  # tenant-scoped
    await store.list_sessions(tenant_id) -> list[SessionRecord]
    await store.delete_session(tenant_id, session_id) -> bool

Errors: ``InvalidInput`` (bad name/role/token name/profile), ``Conflict`` (duplicate tenant name),
``NotFound`` (unknown tenant on create_token/create_session), ``ConfigError`` (bad bootstrap
token, database newer than the code). Malformed ids are never an error on lookups: they are
simply not found. Ids: ``t_``/``s_``/``k_`` + 16 hex (``runtime.store.ids``).
"""

from runtime.store.ids import (
    TenantId,
    TenantName,
    check_session_id,
    check_tenant_id,
    is_session_id,
    is_tenant_id,
    new_session_id,
    new_tenant_id,
)
from runtime.store.migrations import MIGRATIONS, Migration
from runtime.store.models import ROLES, Role, SessionRecord, Tenant, TokenRecord
from runtime.store.store import ADMIN_TENANT, Store
from runtime.store.tenants import Tenants
from runtime.store.tokens import MAX_EXPIRES_IN_S, hash_token

__all__ = [
    "ADMIN_TENANT",
    "MAX_EXPIRES_IN_S",
    "MIGRATIONS",
    "Migration",
    "ROLES",
    "Role",
    "SessionRecord",
    "Store",
    "Tenant",
    "TenantId",
    "TenantName",
    "Tenants",
    "TokenRecord",
    "check_session_id",
    "check_tenant_id",
    "hash_token",
    "is_session_id",
    "is_tenant_id",
    "new_session_id",
    "new_tenant_id",
]
