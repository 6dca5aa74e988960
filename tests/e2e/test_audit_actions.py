"""Every state change through the API or an agent tool is decided and audited first, with
``action`` and ``object`` (docs/audit.md): sessions, files, tools."""

from __future__ import annotations

from tests.e2e.conftest import Server

TOOL = ('name = "probe"\ndescription = "d"\nparameters = {"type": "object"}\n'
        "async def execute(params):\n    return 'ok'\n")


def test_session_file_and_tool_changes_are_audited(server: Server) -> None:
    tenant, user = server.tenant_with_user()
    with server.client(user) as client:
        session = client.post("/v1/sessions", json={}).json()["id"]
        put = client.put(f"/v1/sessions/{session}/files/dir/a.txt", content=b"x",
                         headers={"Content-Type": "application/octet-stream"})
        assert put.status_code == 201
        assert client.delete(f"/v1/sessions/{session}/files/dir/a.txt").status_code == 204
        assert client.delete(f"/v1/sessions/{session}/files/nope.txt").status_code == 404
        for tool, args in (("filesystem", {"action": "write", "path": "b.txt", "content": "y"}),
                           ("filesystem", {"action": "move", "path": "b.txt",
                                           "destination": "c.txt"}),
                           ("filesystem", {"action": "delete", "path": "c.txt"}),
                           ("write_tool", {"name": "probe", "code": TOOL}),
                           ("reload_tools", {}), ("delete_tool", {"name": "probe"})):
            done = client.post(f"/v1/sessions/{session}/exec", json={"tool": tool, "args": args})
            assert done.status_code == 200 and done.json()["ok"], done.text
        assert client.delete(f"/v1/sessions/{session}").status_code == 204
    with server.client(server.token_for(tenant, "auditor")) as auditor:
        records = auditor.get("/v1/audit", params={"session": session}).json()
    changes = [(r["action"], r["object"]) for r in records if r["kind"] == "action"]
    assert changes == [
        ("session.create", session), ("file.write", "dir/a.txt"), ("file.delete", "dir/a.txt"),
        ("file.write", "b.txt"), ("file.move", "b.txt"), ("file.delete", "c.txt"),
        ("tool.write", "probe"), ("tool.reload", "*"), ("tool.delete", "probe"),
        ("session.delete", session),
    ]  # the delete of a missing file was refused (404) before anything was recorded
    write = next(r for r in records if r["action"] == "tool.write")
    assert len(write["tool_hash"]) == 64 and write["rule"].startswith("profiles.developer")
    assert all(r["user"] and r["tenant"] == tenant for r in records)
