"""The processes API in-process (the whole app, a real store and audit log, `FakeBackend`):
what is refused before any container is thought of."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.agent_app import agent_app


async def test_refusals_before_a_container(tmp_path: Path) -> None:
    async with agent_app(tmp_path) as app:
        token, session = await app.user_session()
        base = f"/v1/sessions/{session}/processes"
        # a session on a cluster node this server does not reach: 503, nothing recorded
        await app.services.store.connection.execute(
            "UPDATE sessions SET node = 'node-7' WHERE id = ?", (session,))
        on_node = await app.post(token, base, json={"command": "sleep 1"})
        assert on_node.status_code == 503, on_node.text
        assert on_node.json()["error"]["code"] == "node_unavailable"
        assert (await app.get(token, base)).json() == []
        # this server's backend is not Docker: a clear 409, nothing decided or recorded
        token2 = await app.token(await app.tenant())
        local_session = await app.session(token2)
        fake = await app.post(token2, f"/v1/sessions/{local_session}/processes",
                              json={"command": "sleep 1"})
        assert fake.status_code == 409 and "Docker engine" in fake.json()["error"]["message"]
        listed = await app.get(token2, f"/v1/sessions/{local_session}/processes")
        assert listed.json() == []
        # another tenant's session is not found
        assert (await app.get(token, f"/v1/sessions/{local_session}/processes")
                ).status_code == 404
        assert not any(r["action"].startswith("process.")
                       for r in await app.audit(local_session))
