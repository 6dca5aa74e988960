"""The secrets API in-process (real store, audit and key file; FakeBackend): tenant admins
manage their own tenant's secrets, admins any; values are write-only; changes audited by
name; the stored form is ciphertext."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_api_roles import Api, _error, api  # noqa: F401

VALUE = "sk-live-3b7e1d9c"


async def test_tenant_admins_set_list_and_delete_their_own_secrets(
        api: Api, tmp_path: Path) -> None:  # noqa: F811
    a, b = await api.tenant("alpha"), await api.tenant("beta")
    boss = (await api.mint(a, "tenant_admin"))["token"]
    user = (await api.mint(a, "user"))["token"]
    put = await api.call(boss, "PUT", f"/v1/tenants/{a}/secrets/weather_key",
                         json={"value": VALUE})
    assert put.status_code == 204 and put.content == b""
    listed = await api.call(boss, "GET", f"/v1/tenants/{a}/secrets")
    assert [s["name"] for s in listed.json()] == ["weather_key"] and VALUE not in listed.text
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            assert VALUE.encode() not in path.read_bytes(), path
    # another tenant's are 404 to a tenant admin, a user may not manage, an admin may
    assert _error(await api.call(boss, "GET", f"/v1/tenants/{b}/secrets"), 404) == "not_found"
    assert _error(await api.call(boss, "PUT", f"/v1/tenants/{b}/secrets/x",
                                 json={"value": "v"}), 404) == "not_found"
    assert (await api.call(user, "GET", f"/v1/tenants/{a}/secrets")).status_code == 403
    assert (await api.call(api.admin_token, "GET", f"/v1/tenants/{a}/secrets")).status_code \
        == 200
    # bad names and values are 4xx without echoing the value
    for name, body in [("Bad-Name", {"value": "v"}), ("ok", {"value": ""}),
                       ("ok", {"value": VALUE, "extra": 1})]:
        resp = await api.call(boss, "PUT", f"/v1/tenants/{a}/secrets/{name}", json=body)
        assert 400 <= resp.status_code < 500 and VALUE not in resp.text
    assert (await api.call(boss, "DELETE", f"/v1/tenants/{a}/secrets/weather_key")).status_code \
        == 204
    assert _error(await api.call(boss, "DELETE", f"/v1/tenants/{a}/secrets/weather_key"),
                  404) == "not_found"
    actions = [(r["action"], r["object"]) for r in await api.records(a)
               if r["action"].startswith("secret.")]
    assert actions == [("secret.set", "weather_key"), ("secret.delete", "weather_key")]
    key = tmp_path / "data" / "keys" / "secrets.key"
    assert key.stat().st_mode & 0o777 == 0o600


async def test_a_name_with_a_trailing_newline_is_refused(api: Api) -> None:  # noqa: F811
    a = await api.tenant("alpha")
    boss = (await api.mint(a, "tenant_admin"))["token"]
    for method, body in [("PUT", {"value": VALUE}), ("DELETE", None)]:
        resp = await api.call(boss, method, f"/v1/tenants/{a}/secrets/abc%0A", json=body)
        assert _error(resp, 400) == "invalid_input" and VALUE not in resp.text
    assert (await api.call(boss, "GET", f"/v1/tenants/{a}/secrets")).json() == []
