"""`navi tokens`: against a real data directory, checked through the store it wrote."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from typer.testing import CliRunner

from runtime.cli import app
from runtime.store import Store

runner = CliRunner()


def _invoke(*args: str):
    return runner.invoke(app, ["tokens", *args])


def _authenticate(data_dir: Path, token: str):
    """Check through the store (sync tests: the command itself runs its own event loop)."""

    async def go():
        async with await Store.open(data_dir / "navi.sqlite3") as store:
            return await store.authenticate(token)

    return asyncio.run(go())


def test_create_makes_tenant_and_prints_token_once(tmp_path: Path) -> None:
    result = _invoke("create", "--tenant", "acme", "--role", "user", "--data-dir",
                     str(tmp_path), "--label", "ci")
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    assert token.startswith("navi_") and "\n" not in token
    assert "created tenant acme" in result.stderr
    record = _authenticate(tmp_path, token)
    assert record is not None and record.role == "user" and record.name == "ci"
    assert token.encode() not in (tmp_path / "navi.sqlite3").read_bytes()

    again = _invoke("create", "--tenant", "acme", "--role", "auditor", "--data-dir",
                    str(tmp_path), "--json")
    assert again.exit_code == 0, again.output
    body = json.loads(again.stdout)
    assert body["tenant_created"] is False and body["tenant_id"] == record.tenant_id
    assert body["role"] == "auditor" and body["token"] != token
    assert "created tenant" not in again.stderr


def test_bad_role_and_name_fail_cleanly(tmp_path: Path) -> None:
    bad_role = _invoke("create", "--tenant", "acme", "--role", "root", "--data-dir",
                       str(tmp_path))
    assert bad_role.exit_code == 2 and "role" in bad_role.stderr
    bad_name = _invoke("create", "--tenant", "../etc", "--role", "user", "--data-dir",
                       str(tmp_path))
    assert bad_name.exit_code == 2 and "tenant name" in bad_name.stderr
    assert "Traceback" not in bad_name.output


def test_list_and_revoke(tmp_path: Path) -> None:
    made = json.loads(_invoke("create", "--tenant", "lab", "--role", "admin", "--data-dir",
                              str(tmp_path), "--json").stdout)
    listed = json.loads(_invoke("list", "--tenant", "lab", "--data-dir", str(tmp_path),
                                "--json").stdout)
    assert [t["id"] for t in listed] == [made["id"]]
    assert made["token"] not in json.dumps(listed)
    assert _invoke("revoke", made["id"], "--data-dir", str(tmp_path)).exit_code == 0
    assert _authenticate(tmp_path, made["token"]) is None
    assert _invoke("revoke", made["id"], "--data-dir", str(tmp_path)).exit_code == 1
    assert _invoke("list", "--tenant", "nobody", "--data-dir", str(tmp_path)).exit_code == 2


def test_data_dir_from_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NAVI_DATA_DIR", str(tmp_path / "env-data"))
    result = _invoke("create", "--tenant", "acme", "--role", "user")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "env-data" / "navi.sqlite3").exists()
