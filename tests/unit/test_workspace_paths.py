"""``split_path``: what a workspace path may look like, before any system call."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.errors import InvalidPath
from runtime.workspace import MAX_COMPONENT_BYTES, MAX_DEPTH, MAX_PATH_BYTES, split_path


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("a.txt", ("a.txt",)),
        ("dir/sub/file.py", ("dir", "sub", "file.py")),
        ("dir/", ("dir",)),
        ("..a/b..", ("..a", "b..")),
        (".hidden", (".hidden",)),
        ("100%.txt", ("100%.txt",)),
        ("naïve/日本.txt", ("naïve", "日本.txt")),
        ("a" * MAX_COMPONENT_BYTES, ("a" * MAX_COMPONENT_BYTES,)),
        ("a\uff0fb", ("a\uff0fb",)),  # fullwidth solidus: one name; NFKC 'a/b' is harmless
    ],
)
def test_accepts_plain_relative_paths(path: str, parts: tuple[str, ...]) -> None:
    assert split_path(path) == parts


def test_root_only_when_allowed() -> None:
    assert split_path("", allow_root=True) == ()
    with pytest.raises(InvalidPath):
        split_path("")


@pytest.mark.parametrize(
    "path",
    [
        "..", "../", "../x", "a/../../x", "a/..", "./a", "a/./b", ".",
        "/etc/passwd", "/", "//x",
        "a//b",
        "a\x00b", "\x00",
        "..\\..\\etc\\passwd", "a\\b",
        "%2e%2e/x", "..%2fx", "%2e%2e%2fetc%2fpasswd", "%2F", "a%00b", "%252e%252e",
        "a\nb", "a\rb", "\x7f",
        "\uff0e\uff0e/etc/passwd",  # fullwidth dots: NFKC '..'
        "\u2025/x",                  # two-dot leader: NFKC '..'
        "x" * (MAX_COMPONENT_BYTES + 1),
        "/".join(["d"] * (MAX_DEPTH + 1)),
        "a/" * (MAX_PATH_BYTES // 2) + "b",
        "\udcff",                    # lone surrogate: not UTF-8
        ".navi-tmp-0123",            # the atomic writer's temporary names
        "d/.navi-tmp-x",
    ],
)
def test_refuses_unsafe_paths(path: str) -> None:
    with pytest.raises(InvalidPath) as info:
        split_path(path)
    assert info.value.message.startswith("invalid path: ")


def test_non_text_is_refused() -> None:
    with pytest.raises(InvalidPath):
        split_path(b"a")  # type: ignore[arg-type]


@given(st.text(max_size=60))
def test_accepted_paths_are_plain(path: str) -> None:
    try:
        parts = split_path(path)
    except InvalidPath:
        return
    for part in parts:
        assert part not in ("", ".", "..")
        assert "/" not in part and "\\" not in part and "\x00" not in part
