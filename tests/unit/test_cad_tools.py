"""CAD tools without an engine: OpenSCAD log parsing (real 2021.01 output), argument checks,
the helper's reply protocol, PNG checks, registration and policy; and the in-image Landlock
module, confining a real subprocess on this kernel."""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

from runtime.config import PROJECT_ROOT
from runtime.errors import InvalidInput
from runtime.policy import PolicyEngine, Subject
from runtime.policy.decision import Action
from runtime.tools import build_tools
from runtime.tools.cad.diagnostics import display_file, parse_log, summary
from runtime.tools.cad.model import MAX_CODE_BYTES, Model3DTool, ScadLintTool
from runtime.tools.cad.protocol import parse_reply
from runtime.tools.cad.render import Render3DTool, output_paths, png_size

LINT_BASE, LINT_MAIN = "/tmp/navi-lint", "/tmp/navi-lint/input.scad"
MODEL_BASE, MODEL_MAIN = "/workspace/models", "/workspace/models/gear.scad"

# Verbatim OpenSCAD 2021.01 output (lint of a file with problems, then a compile).
LINT_LOG = """\
WARNING: Ignoring unknown function 'bar' in file input.scad, line 4
WARNING: Ignoring unknown variable 'x' in file input.scad, line 2
WARNING: Unable to convert translate([undef, 0, 0]) parameter to a vec3 or vec2 of numbers \
in file input.scad, line 2
WARNING: Ignoring unknown module 'foo' in file input.scad, line 3
ERROR: Assertion '(1 == 2)' failed: "one is not two" in file input.scad, line 5
TRACE: called by 'assert' in file input.scad, line 5
WARNING: Ignoring unknown module 'undefined_thing' in file ../../workspace/sub/lib.scad, line 2
ECHO: "hi", 2
WARNING: x was assigned on line 1 but was overwritten in file input.scad, line 7
"""
COMPILE_LOG = """\
ERROR: Parser error: syntax error in file gear.scad, line 3
Can't parse file 'gear.scad'!

WARNING: Can't open include file '/etc/passwd'.
WARNING: Can't open import file '/workspace/models/leak.stl', import() at line 6
ERROR: Unsupported file format while trying to import file '"../../etc/passwd"', import() at line 4
Geometries in cache: 5
Total rendering time: 0:00:00.000
Current top level object is empty.
"""


def test_lint_log_becomes_line_numbered_diagnostics() -> None:
    found = parse_log(LINT_LOG, base_dir=LINT_BASE, main_file=LINT_MAIN)
    got = [(d.severity, d.file, d.line) for d in found]
    assert got == [
        ("warning", None, 4), ("warning", None, 2), ("warning", None, 2), ("warning", None, 3),
        ("error", None, 5), ("trace", None, 5), ("warning", "sub/lib.scad", 2),
        ("echo", None, None), ("warning", None, 7),
    ]
    assert found[1].message == "Ignoring unknown variable 'x'"
    assert found[4].message == "Assertion '(1 == 2)' failed: \"one is not two\""
    assert found[7].message == '"hi", 2'
    assert found[8].message == "x was assigned on line 1 but was overwritten"
    text = summary(found)
    assert text.splitlines()[0] == "1 error, 6 warnings"
    assert "  line 2: warning: Ignoring unknown variable 'x'" in text
    assert "  sub/lib.scad:line 2: warning: Ignoring unknown module 'undefined_thing'" in text


def test_compile_log_noise_is_dropped_and_plain_messages_explained() -> None:
    found = parse_log(COMPILE_LOG, base_dir=MODEL_BASE, main_file=MODEL_MAIN)
    assert [(d.severity, d.file, d.line) for d in found] == [
        ("error", None, 3), ("warning", None, None), ("warning", None, 6),
        ("error", None, 4), ("error", None, None),
    ]
    assert found[0].message == "Parser error: syntax error"
    assert found[1].message == "Can't open include file '/etc/passwd'."
    assert found[-1].message == "the model is empty: nothing to export"
    old = parse_log('ERROR: Parser error in file "/workspace/models/gear.scad", line 9: '
                    "syntax error", base_dir=MODEL_BASE, main_file=MODEL_MAIN)
    assert (old[0].file, old[0].line, old[0].message) == (None, 9, "Parser error: syntax error")


def test_log_parsing_is_capped() -> None:
    flood = "ECHO: 1\n" * 5000 + "WARNING: " + "x" * 5000 + "\n"
    found = parse_log(flood, base_dir=LINT_BASE, main_file=LINT_MAIN)
    assert len(found) == 200
    long = parse_log("WARNING: " + "y" * 5000, base_dir=LINT_BASE, main_file=LINT_MAIN)
    assert len(long[0].message) == 500


@pytest.mark.parametrize(("name", "base", "shown"), [
    ("gear.scad", MODEL_BASE, None),
    ("../lib/a.scad", MODEL_BASE, "lib/a.scad"),
    ("../../etc/passwd", MODEL_BASE, "/etc/passwd"),
    ("/workspace/x/y.scad", MODEL_BASE, "x/y.scad"),
    ("'input.scad'", LINT_BASE, "/tmp/navi-lint/input.scad"),
])
def test_display_file(name: str, base: str, shown: str | None) -> None:
    assert display_file(name, base, MODEL_MAIN) == shown


def test_model_3d_arguments() -> None:
    tool = Model3DTool()
    assert tool.validate({"code": "cube(1);", "name": "gear.scad"}).name == "gear"  # type: ignore[attr-defined]
    assert tool.validate({"code": "cube(1);", "name": "Gear_2-b.STL"}).name == "Gear_2-b"  # type: ignore[attr-defined]
    for bad in ("../x", "a/b", ".hidden", "", "x" * 65, "a b", "-x", "gear.scad.scad", "ü"):
        with pytest.raises(InvalidInput):
            tool.validate({"code": "cube(1);", "name": bad})
    for code in ("", "cube(1);\x00", "x" * (MAX_CODE_BYTES + 1)):
        with pytest.raises(InvalidInput):
            tool.validate({"code": code, "name": "ok"})
    with pytest.raises(InvalidInput, match="unknown argument"):
        tool.validate({"code": "cube(1);", "name": "ok", "path": "/etc"})
    with pytest.raises(InvalidInput):
        ScadLintTool().validate({"code": "a\x00"})


def test_render_3d_arguments() -> None:
    tool = Render3DTool()
    params = tool.validate({"path": "models/gear.stl"})
    assert params.views is None  # type: ignore[attr-defined]
    two = tool.validate({"path": "a b/x.STL", "views": ["top", "right"]})
    assert two.views == ["top", "right"]  # type: ignore[attr-defined]
    for bad in ({"path": "../x.stl"}, {"path": "/etc/x.stl"}, {"path": "models/x.scad"},
                {"path": "a//b.stl"}, {"path": "ü.stl"}, {"path": "x.stl", "views": []},
                {"path": "x.stl", "views": ["top", "top"]},
                {"path": "x.stl", "views": ["top", "front", "left", "right"]},
                {"path": "x.stl", "views": ["sideways"]}):
        with pytest.raises(InvalidInput):
            tool.validate(bad)


def test_output_paths_and_png_size() -> None:
    assert output_paths("models/my gear.v2.stl", ["isometric", "top"]) == [
        "renders/my_gear_v2_isometric.png", "renders/my_gear_v2_top.png"]
    header = struct.pack(">IIBBBBB", 800, 600, 8, 6, 0, 0, 0)
    png = (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + header
           + struct.pack(">I", zlib.crc32(b"IHDR" + header)))
    assert png_size(png) == (800, 600)
    assert png_size(b"GIF89a" + png[6:]) is None and png_size(png[:20]) is None


def test_reply_is_the_last_json_line() -> None:
    reply = parse_reply('noise\n{"ok": true, "stats": {"triangles": 12}}\n')
    assert reply is not None and reply.ok and reply.field("stats") == {"triangles": 12}
    assert parse_reply("") is None and parse_reply("ECHO: {not json}\n") is None
    assert parse_reply('{"ok": "maybe"}') is None
    assert parse_reply('{"ok": false, "error": "x"}\n\n').error == "x"  # type: ignore[union-attr]


def test_cad_tools_are_registered_and_governed_by_the_policy(tmp_path: Path) -> None:
    registry = build_tools(tmp_path).registry
    specs = {t.name: t.spec() for t in registry.builtins()}
    for name in ("model_3d", "scad_lint", "render_3d"):
        assert specs[name].group == "group:cad"
    assert specs["model_3d"].parameters["required"] == ["code", "name"]
    assert specs["render_3d"].parameters["required"] == ["path"]
    subject = Subject(tenant="t", session="s")
    default = PolicyEngine.from_file(PROJECT_ROOT / "policies" / "default.yaml")
    strict = PolicyEngine.from_file(PROJECT_ROOT / "policies" / "strict.yaml")
    for name in ("model_3d", "scad_lint", "render_3d"):
        action = Action(tool=name, group="group:cad")
        allowed = default.decide(subject, action)
        assert allowed.verdict == "allow" and allowed.image == "openscad"
        denied = strict.decide(subject, action)
        assert denied.verdict == "deny" and denied.rule == "profiles.developer.deny[group:cad]"


LANDLOCK_PROBE = textwrap.dedent("""
    import sys
    sys.path.insert(0, {navi!r})
    import landlock
    if landlock.abi_version() < 1:
        print("NO-LANDLOCK"); sys.exit(0)
    landlock.restrict([({inside!r}, landlock.WRITE), ("/nonexistent", landlock.READ)])
    open({inside!r} + "/ok.txt", "w").write("fine")
    for path in ("/etc/passwd", {outside!r}):
        try:
            open(path).read()
            print("LEAK", path)
        except PermissionError:
            print("DENIED", path)
""")


def test_landlock_module_confines_a_process(tmp_path: Path) -> None:
    inside, outside = tmp_path / "inside", tmp_path / "secret.txt"
    inside.mkdir()
    outside.write_text("host secret")
    code = LANDLOCK_PROBE.format(navi=str(PROJECT_ROOT / "sandbox_images/openscad/navi"),
                                 inside=str(inside), outside=str(outside))
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    if out.strip() == "NO-LANDLOCK":
        pytest.skip("this kernel has no Landlock")
    assert out.split("\n")[:2] == ["DENIED /etc/passwd", f"DENIED {outside}"], out
    assert (inside / "ok.txt").read_text() == "fine"
