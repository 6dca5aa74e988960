"""Every registered tool has a manual; the loader takes tool names only, never paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtime.errors import InvalidInput, NotFound
from runtime.tools import build_tools
from runtime.tools.manuals import DEFAULT_MANUALS_DIR, ManualLibrary


def test_every_registered_tool_has_a_manual(tmp_path: Path) -> None:
    library = ManualLibrary()
    registry = build_tools(tmp_path).registry
    missing = [t.name for t in registry.builtins() if not library.has(t.name)]
    assert missing == [], f"tools without manuals/<name>.md: {missing}"
    for tool in registry.builtins():
        text = library.get(tool.name)
        assert text.startswith(f"# {tool.name}\n"), tool.name
        assert "## " in text  # has sections (parameters, examples, limits)


def test_manual_names_are_tool_names() -> None:
    library = ManualLibrary()
    assert set(library.names()) >= {"code_exec", "filesystem", "write_tool"}
    for bad in ("../README", "..", "code_exec.md", "/etc/passwd", "a/b", "Code_Exec", "", "x" * 65,
                "code_exec\x00"):
        with pytest.raises(InvalidInput):
            library.get(bad)
    with pytest.raises(NotFound):
        library.get("no_such_tool")


def test_symlinked_or_special_manuals_are_not_served(tmp_path: Path) -> None:
    (tmp_path / "real.md").write_text("# real\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    os.symlink(secret, tmp_path / "leak.md")
    os.mkfifo(tmp_path / "fifo.md")
    os.mkdir(tmp_path / "dir.md")
    library = ManualLibrary(tmp_path)
    assert library.get("real") == "# real\n"
    for name in ("leak", "fifo", "dir"):
        with pytest.raises(NotFound):
            library.get(name)
    assert library.names() == ["real"]


def test_default_dir_is_the_repository_manuals() -> None:
    assert DEFAULT_MANUALS_DIR.name == "manuals" and DEFAULT_MANUALS_DIR.is_dir()
