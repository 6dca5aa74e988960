"""User tool files on disk: shipped + per-tenant, atomic writes, hashes, broken files alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from runtime.config import PROJECT_ROOT
from runtime.errors import Forbidden, InvalidInput, NotFound
from runtime.tools.user.catalog import UserToolCatalogs
from runtime.tools.user.descriptor import ToolLoadError, content_hash
from runtime.tools.user.store import UserToolStore


def tool_source(name: str, body: str = 'return "ok"') -> str:
    return (
        f'name = "{name}"\n'
        f'description = "tool {name}"\n'
        'parameters = {"type": "object", "properties": {}}\n\n'
        f"async def execute(params):\n    {body}\n"
    )


@pytest.fixture
def store(tmp_path: Path) -> UserToolStore:
    return UserToolStore(tmp_path / "data")


def test_shipped_tools_load_and_template_is_skipped() -> None:
    store = UserToolStore(Path("/nonexistent-data-dir"))
    catalog = store.scan("t1")
    assert catalog.errors == {}
    assert {"word_count", "json_format", "hash_text"} <= set(catalog.tools)
    assert "my_tool" not in catalog.tools  # _template.py is never loaded
    enabled = json.loads((PROJECT_ROOT / "tools" / "enabled.json").read_text())
    for name, loaded in catalog.tools.items():
        assert loaded.origin == "shipped"
        assert loaded.enabled is (enabled.get(name) is True)


def test_write_records_hash_enables_and_is_private(store: UserToolStore) -> None:
    desc = store.write("t1", "shout", tool_source("shout"))
    tdir = store.tenant_dir("t1")
    assert (tdir / "shout.py").read_text() == tool_source("shout")
    assert desc.sha256 == content_hash(tool_source("shout").encode())
    assert json.loads((tdir / "hashes.json").read_text())["shout"]["sha256"] == desc.sha256
    assert json.loads((tdir / "enabled.json").read_text()) == {"shout": True}
    assert oct(tdir.stat().st_mode & 0o777) == "0o700"
    assert [p.name for p in tdir.iterdir() if ".tmp-" in p.name] == []
    loaded = store.scan("t1").tools["shout"]
    assert loaded.enabled and loaded.origin == "tenant" and loaded.path == tdir / "shout.py"
    # another tenant does not see it
    assert "shout" not in store.scan("t2").tools


@pytest.mark.parametrize(
    ("name", "code", "error"),
    [
        ("Bad-Name", tool_source("x"), ToolLoadError),
        ("shout", tool_source("other"), ToolLoadError),  # declared name differs
        ("code_exec", tool_source("code_exec"), ToolLoadError),  # a built-in
        ("word_count", tool_source("word_count"), ToolLoadError),  # a shipped tool
        ("shout", "name = 'shout'\n", ToolLoadError),
    ],
)
def test_write_refuses(store: UserToolStore, name: str, code: str, error: type) -> None:
    with pytest.raises(error):
        store.write("t1", name, code)
    assert not (store.tenant_dir("t1") / f"{name}.py").exists()


def test_bad_tenant_ids_refused(store: UserToolStore) -> None:
    for tenant in ("..", "../x", "a/b", "", ".hidden"):
        with pytest.raises(InvalidInput):
            store.write(tenant, "shout", tool_source("shout"))


def test_broken_file_fails_alone(store: UserToolStore) -> None:
    store.write("t1", "good_one", tool_source("good_one"))
    tdir = store.tenant_dir("t1")
    (tdir / "broken.py").write_text("name = 'broken'\ndef execute(:\n")
    (tdir / "sync_exec.py").write_text(tool_source("sync_exec").replace("async def", "def"))
    (tdir / "renamed.py").write_text(tool_source("other_name"))
    os.symlink("/etc/passwd", tdir / "linked.py")
    catalog = store.scan("t1")
    assert "good_one" in catalog.tools and catalog.tools["good_one"].enabled
    assert "syntax error" in catalog.errors["broken"]
    assert "async def" in catalog.errors["sync_exec"]
    assert "must be 'renamed'" in catalog.errors["renamed"]
    assert "linked" in catalog.errors
    assert {"word_count", "json_format", "hash_text"} <= set(catalog.tools)


def test_file_changed_behind_the_runtime_does_not_load(store: UserToolStore) -> None:
    store.write("t1", "shout", tool_source("shout"))
    path = store.tenant_dir("t1") / "shout.py"
    loaded = store.scan("t1").tools["shout"]
    path.write_text(tool_source("shout", 'return "evil"'))
    assert "hash recorded by write_tool" in store.scan("t1").errors["shout"]
    with pytest.raises(ToolLoadError, match="changed since it was loaded"):
        store.read_verified(loaded)


def test_delete(store: UserToolStore) -> None:
    store.write("t1", "shout", tool_source("shout"))
    store.delete("t1", "shout")
    tdir = store.tenant_dir("t1")
    assert not (tdir / "shout.py").exists()
    assert "shout" not in json.loads((tdir / "hashes.json").read_text())
    assert "shout" not in json.loads((tdir / "enabled.json").read_text())
    with pytest.raises(NotFound):
        store.delete("t1", "shout")
    with pytest.raises(Forbidden):
        store.delete("t1", "word_count")


def test_load_one_fresh_before_reload(store: UserToolStore) -> None:
    store.write("t1", "shout", tool_source("shout"))
    assert store.load("t1", "shout").descriptor.name == "shout"
    assert store.load("t1", "word_count").origin == "shipped"
    with pytest.raises(NotFound):
        store.load("t1", "nope")


async def test_catalog_snapshot_changes_only_on_reload(store: UserToolStore) -> None:
    catalogs = UserToolCatalogs(store)
    assert "shout" not in (await catalogs.get("t1")).tools
    store.write("t1", "shout", tool_source("shout"))
    assert "shout" not in (await catalogs.get("t1")).tools
    assert "shout" in (await catalogs.reload("t1")).tools
    assert "shout" in (await catalogs.get("t1")).tools
    await catalogs.drop("t1", "shout")
    assert "shout" not in (await catalogs.get("t1")).tools
