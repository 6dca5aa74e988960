"""The store's read cache (tokens, sessions) never answers with a row that changed: a
revoke or a delete committed by another connection (another process: `navi tokens
revoke`) is seen by the very next lookup; an expiry is seen while the token is cached; and
an unchanged file is answered without a trip to the database."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from unittest.mock import patch

from runtime.store import Store
from runtime.store import tokens as store_tokens


def _commit_elsewhere(path: Path, sql: str, *params: object) -> None:
    """A write by another connection, as another process (the CLI) makes one."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA busy_timeout = 5000")
        assert db.execute(sql, params).rowcount == 1
    finally:
        db.close()


class _CountingQueries:
    """A spy on the store connection: how many queries reach the database."""

    def __init__(self, store: Store) -> None:
        self.calls = 0
        self._real = store.connection.execute_fetchall

    async def __call__(self, *args: object, **kwargs: object) -> object:
        self.calls += 1
        return await self._real(*args, **kwargs)  # type: ignore[arg-type]


async def test_a_token_revoked_by_another_connection_is_refused_at_once(tmp_path: Path
                                                                          ) -> None:
    path = tmp_path / "navi.sqlite3"
    async with await Store.open(path) as store:
        tenant = await store.create_tenant("lab")
        plaintext, record = await store.create_token(tenant.id, "user")
        assert await store.authenticate(plaintext) is not None
        assert await store.authenticate(plaintext) is not None  # now from the cache
        _commit_elsewhere(path, "UPDATE tokens SET revoked_at = ? WHERE id = ?",
                          time.time(), record.id)
        assert await store.authenticate(plaintext) is None


async def test_a_session_deleted_by_another_connection_is_gone_at_once(tmp_path: Path
                                                                         ) -> None:
    path = tmp_path / "navi.sqlite3"
    async with await Store.open(path) as store:
        tenant = await store.create_tenant("lab")
        session = await store.create_session(tenant.id, "developer")
        assert await store.get_session(tenant.id, session.id) == session
        assert await store.get_session(tenant.id, session.id) == session  # cached
        _commit_elsewhere(path, "DELETE FROM sessions WHERE id = ?", session.id)
        assert await store.get_session(tenant.id, session.id) is None


async def test_a_cached_token_still_expires(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "navi.sqlite3") as store:
        tenant = await store.create_tenant("lab")
        plaintext, _ = await store.create_token(tenant.id, "user",
                                                 expires_at=time.time() + 60)
        assert await store.authenticate(plaintext) is not None  # cached from here on
        later = time.time() + 61
        with patch.object(store_tokens, "now", lambda: later):
            assert await store.authenticate(plaintext) is None


async def test_an_unchanged_file_is_answered_without_a_query(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "navi.sqlite3") as store:
        tenant = await store.create_tenant("lab")
        plaintext, _ = await store.create_token(tenant.id, "user")
        session = await store.create_session(tenant.id, "developer")
        queries = _CountingQueries(store)
        with patch.object(store.connection, "execute_fetchall", queries):
            for _ in range(3):
                assert await store.authenticate(plaintext) is not None
                assert await store.get_session(tenant.id, session.id) is not None
            assert queries.calls == 2  # the first of each; the rest came from the cache
            await store.create_session(tenant.id, "developer")  # any commit at all
            before = queries.calls
            assert await store.authenticate(plaintext) is not None  # queries again
            assert queries.calls == before + 1


async def test_unknown_tokens_are_not_kept(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "navi.sqlite3") as store:
        queries = _CountingQueries(store)
        with patch.object(store.connection, "execute_fetchall", queries):
            for _ in range(3):
                assert await store.authenticate("navi_not_a_token_at_all") is None
        assert queries.calls == 3


async def test_a_data_dir_with_uri_characters_is_cached_and_revoked(tmp_path: Path) -> None:
    path = tmp_path / "lab #1? 100%" / "navi.sqlite3"  # what a URI would misread
    async with await Store.open(path) as store:
        tenant = await store.create_tenant("lab")
        plaintext, record = await store.create_token(tenant.id, "user")
        queries = _CountingQueries(store)
        with patch.object(store.connection, "execute_fetchall", queries):
            assert await store.authenticate(plaintext) is not None
            assert await store.authenticate(plaintext) is not None
            assert queries.calls == 1  # the probe reads this file's version
        _commit_elsewhere(path, "UPDATE tokens SET revoked_at = ? WHERE id = ?",
                          time.time(), record.id)
        assert await store.authenticate(plaintext) is None
