"""Preview links kept in a real SQLite store: a second `PreviewLinks` (the next server, same
data directory) finds the links again, with the same urls; revoked, expired ones and those
whose process no longer serves their port stay gone; the database holds no link's secret."""

from __future__ import annotations

import time
from pathlib import Path

from runtime.ports.preview_rows import PreviewRows, preview_key
from runtime.ports.previews import PreviewLinks
from runtime.store.store import Store

TEMPLATE = "http://{link}.localhost:9/"


async def alive(token_id: str) -> bool:
    return True


async def test_links_survive_a_restart_and_only_live_ones(tmp_path: Path) -> None:
    path = tmp_path / "navi.sqlite3"
    async with await Store.open(path) as store:
        tenant = await store.create_tenant("acme")
        session = (await store.create_session(tenant.id, "developer")).id
        links = PreviewLinks(TEMPLATE, preview_key(tmp_path / "ports"), PreviewRows(store))
        made = {name: await links.create(tenant=tenant.id, session=session, port=port,
                                         process_id=proc, token_id="tok",
                                         expires_in_s=expires)
                for name, port, proc, expires in [("kept", 3000, "p_1", 600),
                                                  ("revoked", 3000, "p_1", 600),
                                                  ("expiring", 3000, "p_1", 0.3),
                                                  ("ended", 4000, "p_2", 600)]}
        await links.revoke(made["revoked"])
        urls = {name: links.out(link).url for name, link in made.items()}
    raw = path.read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("navi.sqlite3-*"))
    assert not any(link.label.encode() in raw for link in made.values())  # no secret on disk
    time.sleep(0.4)
    serving = {(session, 3000): "p_1"}  # p_2 did not outlive the restart
    async with await Store.open(path) as store:
        again = PreviewLinks(TEMPLATE, preview_key(tmp_path / "ports"), PreviewRows(store))
        assert await again.load(lambda s, p: serving.get((s, p))) == 1
        [kept] = again.list(session, tenant.id)
        assert kept.id == made["kept"].id and again.out(kept).url == urls["kept"]
        host = urls["kept"].split("//")[1].split("/")[0]
        resolved = await again.resolve(host, lambda s, p: serving.get((s, p)), alive)
        assert resolved is not None and resolved.id == made["kept"].id
        for gone in ("revoked", "expiring", "ended"):
            host = urls[gone].split("//")[1].split("/")[0]
            assert await again.resolve(host, lambda s, p: serving.get((s, p)), alive) is None
        async with store.connection.execute("SELECT id FROM preview_links") as cursor:
            assert [row[0] for row in await cursor.fetchall()] == [made["kept"].id]
        await again.revoke(kept)  # a revocation is durable too
    async with await Store.open(path) as store:
        third = PreviewLinks(TEMPLATE, preview_key(tmp_path / "ports"), PreviewRows(store))
        assert await third.load(lambda s, p: serving.get((s, p))) == 0


def test_the_key_is_made_once_and_private(tmp_path: Path) -> None:
    key = preview_key(tmp_path / "ports")
    assert len(key) == 32 and preview_key(tmp_path / "ports") == key
    assert (tmp_path / "ports" / "preview.key").stat().st_mode & 0o777 == 0o600
