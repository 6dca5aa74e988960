"""`GET /v1/cluster/nodes` on a server without NAVI_CLUSTER: 404 for the operator, 403 for
anyone else; session JSON and exec results say `node: "local"`."""

from __future__ import annotations

from tests.e2e.conftest import Server


def test_no_cluster_is_a_404_for_the_operator_and_403_for_others(server: Server) -> None:
    _tenant, user = server.tenant_with_user()
    with server.client(server.admin_token) as admin:
        got = admin.get("/v1/cluster/nodes")
    assert got.status_code == 404 and got.json()["error"]["code"] == "not_found", got.text
    with server.client(user) as client:
        assert client.get("/v1/cluster/nodes").status_code == 403
        made = client.post("/v1/sessions", json={})
        assert made.status_code == 201 and made.json()["node"] == "local", made.text
