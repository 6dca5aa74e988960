"""Numbered schema migrations, applied in order when the store opens.

Each migration runs once, inside one ``BEGIN IMMEDIATE`` transaction together with its row in
``schema_migrations``, so a crash leaves the database at the previous version and two processes
opening the same file (``navi serve`` and ``navi tokens create``) cannot both apply it.

To change the schema, APPEND a ``Migration`` with the next number; never edit or renumber one
that has shipped. Version 2 holds the agent's ``messages``; 4 rebuilds ``tokens``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import aiosqlite

from runtime.errors import ConfigError
from runtime.logging import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "tenants, tokens, sessions",
        (
            """CREATE TABLE tenants (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL COLLATE NOCASE UNIQUE,
                created_at REAL NOT NULL
            )""",
            """CREATE TABLE tokens (
                id TEXT PRIMARY KEY,
                tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
                role TEXT NOT NULL CHECK (role IN ('admin', 'user', 'auditor')),
                label TEXT,
                token_hash TEXT NOT NULL UNIQUE,
                created_at REAL NOT NULL,
                revoked_at REAL,
                bootstrap INTEGER NOT NULL DEFAULT 0
            )""",
            "CREATE INDEX tokens_by_tenant ON tokens(tenant_id)",
            """CREATE TABLE sessions (
                id TEXT PRIMARY KEY,
                tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
                profile TEXT NOT NULL,
                title TEXT,
                created_at REAL NOT NULL
            )""",
            "CREATE INDEX sessions_by_tenant ON sessions(tenant_id, created_at)",
        ),
    ),
    Migration(
        2,
        "messages",  # the agent's conversation (runtime.agent.history); memory has its own file
        (
            """CREATE TABLE messages (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                turn_id TEXT NOT NULL,
                role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'summary')),
                content TEXT NOT NULL DEFAULT '',
                thinking TEXT,
                tool_calls TEXT,
                tool_call_id TEXT,
                tool_name TEXT,
                meta TEXT,
                created_at REAL NOT NULL
            )""",
            "CREATE INDEX messages_by_session ON messages(session_id, id)",
        ),
    ),
    Migration(
        3,
        "a sandbox uid per tenant",  # runtime.store.sandbox_uids allocates them
        (
            "ALTER TABLE tenants ADD COLUMN sandbox_uid INTEGER",
            "CREATE UNIQUE INDEX tenants_by_sandbox_uid ON tenants(sandbox_uid)",
        ),
    ),
    Migration(
        4,
        "tokens: role tenant_admin, name, expires_at",  # runtime.store.tokens
        # SQLite cannot alter a CHECK: build the new table, copy the rows, swap. `label`
        # becomes `name`. An admin token outside the operator tenant (the first admin
        # token's; older versions let an admin mint admins anywhere) becomes tenant_admin.
        (
            """CREATE TABLE tokens_v4 (
                id TEXT PRIMARY KEY,
                tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
                role TEXT NOT NULL
                    CHECK (role IN ('admin', 'tenant_admin', 'user', 'auditor')),
                name TEXT,
                token_hash TEXT NOT NULL UNIQUE,
                created_at REAL NOT NULL,
                expires_at REAL,
                revoked_at REAL,
                bootstrap INTEGER NOT NULL DEFAULT 0
            )""",
            """INSERT INTO tokens_v4 (id, tenant_id, role, name, token_hash, created_at,
                                     expires_at, revoked_at, bootstrap)
            SELECT id, tenant_id,
                   CASE WHEN role = 'admin' AND tenant_id IS NOT (
                       SELECT tenant_id FROM tokens WHERE role = 'admin'
                       ORDER BY created_at, rowid LIMIT 1)
                   THEN 'tenant_admin' ELSE role END,
                   label, token_hash, created_at, NULL, revoked_at, bootstrap
            FROM tokens ORDER BY rowid""",
            "DROP TABLE tokens",
            "ALTER TABLE tokens_v4 RENAME TO tokens",
            "CREATE INDEX tokens_by_tenant ON tokens(tenant_id)",
        ),
    ),
    Migration(
        5,
        "secrets: tenant-scoped, encrypted values for tools",  # runtime.store.secrets
        (
            """CREATE TABLE secrets (
                tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
                name TEXT NOT NULL,
                ciphertext BLOB NOT NULL,
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL,
                PRIMARY KEY (tenant_id, name)
            )""",
        ),
    ),
    Migration(
        6,
        "shares: links to session files without a token",  # runtime.store.shares
        (
            """CREATE TABLE shares (
                id TEXT PRIMARY KEY,
                tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
                session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                kind TEXT NOT NULL CHECK (kind IN ('share', 'publish')),
                path TEXT NOT NULL,
                token_hash TEXT NOT NULL UNIQUE,
                created_at REAL NOT NULL,
                expires_at REAL,
                revoked_at REAL,
                downloads INTEGER NOT NULL DEFAULT 0
            )""",
            "CREATE INDEX shares_by_session ON shares(session_id, created_at)",
            "CREATE INDEX shares_by_tenant ON shares(tenant_id)",
        ),
    ),
    Migration(
        7,
        "sessions.node: the cluster node a session lives on",  # runtime.cluster.placement
        (
            "ALTER TABLE sessions ADD COLUMN node TEXT NOT NULL DEFAULT 'local'",
            "CREATE INDEX sessions_by_node ON sessions(node)",
        ),
    ),
    Migration(
        8,
        "e2b: sandboxes made through /e2b and their access tokens",  # runtime.e2b.store
        (
            """CREATE TABLE e2b_sandboxes (
                session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
                tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
                template TEXT NOT NULL,
                metadata TEXT NOT NULL DEFAULT '{}',
                envs TEXT NOT NULL DEFAULT '{}',
                started_at REAL NOT NULL,
                end_at REAL NOT NULL
            )""",
            "CREATE INDEX e2b_sandboxes_by_tenant ON e2b_sandboxes(tenant_id, started_at)",
            "CREATE INDEX e2b_sandboxes_by_end ON e2b_sandboxes(end_at)",
            """CREATE TABLE e2b_tokens (
                token_hash TEXT PRIMARY KEY,
                session_id TEXT NOT NULL,  -- outlives its sandbox: "not running", not 401
                key_id TEXT NOT NULL REFERENCES tokens(id) ON DELETE CASCADE,
                kind TEXT NOT NULL CHECK (kind IN ('envd', 'traffic')),
                created_at REAL NOT NULL
            )""",
            "CREATE INDEX e2b_tokens_by_session ON e2b_tokens(session_id)",
        ),
    ),
    Migration(
        9,
        "processes: a session's background processes",  # runtime.processes.records
        (
            """CREATE TABLE processes (
                id TEXT PRIMARY KEY,
                tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
                session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                name TEXT,
                command TEXT NOT NULL,
                cwd TEXT NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('running', 'exited')),
                exit_code INTEGER,
                reason TEXT,
                started_at REAL NOT NULL,
                ended_at REAL,
                ports TEXT NOT NULL DEFAULT '[]',
                node TEXT NOT NULL DEFAULT 'local',
                runtime TEXT NOT NULL,
                kind TEXT NOT NULL DEFAULT 'command',
                container TEXT,
                token_id TEXT,
                token_expires_at REAL,
                egress INTEGER NOT NULL DEFAULT 0,
                output_bytes INTEGER NOT NULL DEFAULT 0
            )""",
            "CREATE INDEX processes_by_session ON processes(session_id, started_at)",
            "CREATE INDEX processes_by_state ON processes(state)",
        ),
    ),
    Migration(
        10,
        "e2b: commands' pids and code contexts of sandboxes",  # runtime.e2b.store
        (
            """CREATE TABLE e2b_pids (
                session_id TEXT NOT NULL REFERENCES e2b_sandboxes(session_id)
                    ON DELETE CASCADE,
                pid INTEGER NOT NULL,
                process_id TEXT NOT NULL,
                tag TEXT,
                config TEXT NOT NULL DEFAULT '{}',
                PRIMARY KEY (session_id, pid)
            )""",
            """CREATE TABLE e2b_contexts (
                session_id TEXT NOT NULL REFERENCES e2b_sandboxes(session_id)
                    ON DELETE CASCADE,
                context_id TEXT NOT NULL,
                kernel TEXT NOT NULL,
                created_at REAL NOT NULL,
                PRIMARY KEY (session_id, context_id)
            )""",
        ),
    ),
    Migration(
        11,
        "preview links survive a restart",  # runtime.ports.previews (the secret is not kept)
        (
            """CREATE TABLE preview_links (
                id TEXT PRIMARY KEY,
                tenant_id TEXT NOT NULL,
                session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                port INTEGER NOT NULL,
                process_id TEXT NOT NULL,
                token_id TEXT NOT NULL,
                created_at REAL NOT NULL,
                expires_at REAL NOT NULL
            )""",
            "CREATE INDEX preview_links_by_session ON preview_links(session_id)",
        ),
    ),
)

_BOOKKEEPING = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at REAL NOT NULL
)"""


def _check_sequence(migrations: tuple[Migration, ...]) -> None:
    expected = list(range(1, len(migrations) + 1))
    if [m.version for m in migrations] != expected:
        raise ConfigError("migrations must be numbered 1, 2, 3, ... without gaps")


async def current_version(db: aiosqlite.Connection) -> int:
    async with db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations") as cur:
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def apply_migrations(
    db: aiosqlite.Connection, migrations: tuple[Migration, ...] = MIGRATIONS
) -> list[int]:
    """Bring ``db`` (autocommit mode) up to the newest version; return the versions applied."""
    _check_sequence(migrations)
    await db.execute(_BOOKKEEPING)
    applied: list[int] = []
    for migration in migrations:
        await db.execute("BEGIN IMMEDIATE")
        try:
            version = await current_version(db)
            if version >= migration.version:
                await db.execute("ROLLBACK")
                continue
            if version != migration.version - 1:
                raise ConfigError(f"database at schema version {version}, cannot apply "
                                  f"migration {migration.version}")
            for statement in migration.statements:
                await db.execute(statement)
            await db.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.name, time.time()),
            )
            await db.execute("COMMIT")
        except BaseException:
            await db.execute("ROLLBACK")
            raise
        applied.append(migration.version)
        log.info("store_migrated", version=migration.version, name=migration.name)
    newest = await current_version(db)
    if newest > len(migrations):
        raise ConfigError(
            f"database schema version {newest} is newer than this runtime "
            f"({len(migrations)}); upgrade navi-runtime"
        )
    return applied
