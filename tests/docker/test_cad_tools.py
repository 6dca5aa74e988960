"""The CAD tools end to end on real models: registry -> Executor (real policy, real audit) ->
DockerBackend -> the openscad image's helper in a hardened container.

Image: ``NAVI_TEST_OPENSCAD_IMAGE``, default ``navi/openscad:latest`` (`navi images build
openscad`). Rendered PNGs are decoded here (zlib, no Pillow) and checked pixel by pixel; set
``NAVI_CAD_KEEP=DIR`` to keep copies for a human look.
"""

from __future__ import annotations

import base64
import math
import os
import shutil
import struct
import time
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.images import image_ref
from tests.docker.tool_rig import DockerToolRig, docker_tool_rig, present_image
from tests.fakes.calls import call

pytestmark = pytest.mark.docker

HOLED_CUBE = """// a 20 mm cube with a spherical hole in the middle
difference() {
  cube(20, center=true);
  sphere(r=8, $fn=64);
}
"""


@pytest.fixture(scope="session")
def openscad_image(docker_api: docker.APIClient) -> str:
    wanted = os.environ.get("NAVI_TEST_OPENSCAD_IMAGE", image_ref("openscad"))
    return present_image(docker_api, wanted, "openscad")


@dataclass
class CadRig(DockerToolRig):
    async def call(self, tool: str, args: dict[str, object], **kw: object):  # type: ignore[no-untyped-def]
        return await call(self.services.registry, tool, args, self.ctx(**kw))


@pytest.fixture
async def cad(
    tmp_path: Path, backend: DockerBackend, backend_config: DockerBackendConfig,
    openscad_image: str,
) -> AsyncIterator[CadRig]:
    async with docker_tool_rig(tmp_path, backend, backend_config,
                               images={"openscad": openscad_image}, user="tok") as made:
        yield CadRig(**vars(made))


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit, non-interlaced RGB/RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and color in (2, 6) and interlace == 0
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, ul = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - ul
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - ul)
                pred = left if pa <= pb and pa <= pc else (up if pb <= pc else ul)
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line[i] for i in range(stride) if i % bpp < 3))
        prev = line
    return width, height, rows


async def test_cube_with_spherical_hole_is_watertight_with_the_right_volume(cad: CadRig) -> None:
    started = time.monotonic()
    r = await cad.call("model_3d", {"name": "holed_cube", "code": HOLED_CUBE})
    elapsed = time.monotonic() - started
    assert r.success, (r.error, r.output, r.metadata.get("stderr"))
    mesh = r.metadata["mesh"]
    assert r.metadata["exit_code"] == 0 and mesh["watertight"] and mesh["winding_consistent"]
    ideal = 20**3 - 4 / 3 * math.pi * 8**3  # 5855.3; the 64-gon sphere is a little smaller
    assert ideal < mesh["volume"] < ideal * 1.01, mesh
    assert mesh["bbox_min"] == [-10, -10, -10] and mesh["bbox_max"] == [10, 10, 10]
    assert mesh["size"] == [20, 20, 20] and mesh["triangles"] > 1000
    assert "watertight: yes" in r.output and "0 errors, 0 warnings" in r.output
    # both files are in the workspace; the STL is binary with the reported triangle count
    assert cad.ws.read_bytes("models/holed_cube.scad").decode() == HOLED_CUBE
    stl = cad.ws.read_bytes("models/holed_cube.stl")
    assert len(stl) == r.metadata["stl_bytes"] == 84 + 50 * mesh["triangles"]
    assert struct.unpack("<I", stl[80:84])[0] == mesh["triangles"]
    [intent] = await cad.audit.records(kind="intent", exec_id=r.metadata["exec_id"])
    assert intent.tool == "model_3d" and intent.rule == "profiles.developer.allow[group:cad]"
    print(f"\nmodel_3d holed cube: {elapsed:.2f} s wall, OpenSCAD {r.metadata['compile_ms']} ms, "
          f"container {r.metadata['duration_ms']} ms")


async def test_lint_gives_line_numbered_errors_and_writes_nothing(cad: CadRig) -> None:
    bad = "cube(10);\nsphere(5\ncube(2);\n"
    r = await cad.call("scad_lint", {"code": bad})
    assert not r.success and r.metadata["errors"] == 1
    assert r.metadata["exit_code"] == 1 and not r.metadata["ok"]  # the exec result agrees
    [diag] = [d for d in r.metadata["diagnostics"] if d["severity"] == "error"]
    assert diag["line"] == 3 and diag["file"] is None and "syntax error" in diag["message"]
    assert r.error == "1 error; first: line 3: error: Parser error: syntax error"

    warn = "cube(10);\ntranslate([x, 0, 0]) cube(2);\nfoo();\necho(\"hi\", 1 + 1);\n"
    r = await cad.call("scad_lint", {"code": warn})
    assert r.success, r.error
    assert r.metadata["exit_code"] == 0 and r.metadata["ok"]
    lines = {(d["severity"], d["line"]) for d in r.metadata["diagnostics"]}
    assert {("warning", 2), ("warning", 3)} <= lines
    assert "line 2: warning: Ignoring unknown variable 'x'" in r.output
    assert any(d["severity"] == "echo" and '"hi", 2' in d["message"]
               for d in r.metadata["diagnostics"])
    assert cad.ws.list() == []  # lint exports nothing into the workspace


async def test_cad_scratch_files_stay_out_of_the_session_s_tmp(cad: CadRig) -> None:
    """The helper's scratch files (lint input, OpenSCAD's temporaries) go to a tmpfs of the
    call, not to the session's persistent /tmp: they would stay there, counted in its disk."""
    session_tmp = cad.ws_path.parent / "tmp"
    session_tmp.mkdir(exist_ok=True)
    os.chown(session_tmp, *cad.ws_path.stat()[4:6])  # st_uid, st_gid: as the workspace
    r = await cad.call("scad_lint", {"code": "cube(10);\n"}, tmp_path=session_tmp)
    assert r.success, r.error
    r = await cad.call("model_3d", {"name": "cube", "code": "cube(10);\n"},
                       tmp_path=session_tmp)
    assert r.success, r.error
    assert list(session_tmp.iterdir()) == []


async def test_compile_error_keeps_the_source_and_reports_the_line(cad: CadRig) -> None:
    r = await cad.call("model_3d", {"name": "broken.scad",
                                    "code": "cube(1);\nassert(1 == 2, \"nope\");\n"})
    assert not r.success and r.metadata["exit_code"] == 1
    assert any(d["severity"] == "error" and d["line"] == 2 for d in r.metadata["diagnostics"])
    assert [e.path for e in cad.ws.list("models")] == ["models/broken.scad"]
    flat = await cad.call("model_3d", {"name": "flat", "code": "square(5);"})
    assert not flat.success and "not 3D" in flat.output


async def test_models_include_the_session_libraries(cad: CadRig) -> None:
    cad.ws.write_bytes("lib/shapes.scad", b"module peg(h) { cylinder(h=h, r=2, $fn=24); }\n"
                                          b"echo(undefined_width);\n")
    cad.ws.write_bytes("top.scad", b"module plate() { cube([20, 20, 2]); }\n")
    code = "include <../lib/shapes.scad>\nuse <top.scad>\nplate();\npeg(10);\n"
    r = await cad.call("model_3d", {"name": "pegboard", "code": code})
    assert r.success, (r.error, r.metadata["stderr"])
    assert r.metadata["mesh"]["bbox_max"][2] == 10
    [warning] = [d for d in r.metadata["diagnostics"] if d["severity"] == "warning"]
    assert (warning["file"], warning["line"]) == ("lib/shapes.scad", 2), warning
    assert "lib/shapes.scad:line 2: warning: Ignoring unknown variable" in r.output
    lint = await cad.call("scad_lint", {"code": code})
    assert lint.success and lint.metadata["warnings"] == 1
    assert lint.metadata["diagnostics"][0]["file"] == "lib/shapes.scad"


async def test_render_three_views_of_the_model(cad: CadRig) -> None:
    demo = ("difference() {\n  union() { cube([30, 20, 10]);\n"
            "    translate([15, 10, 10]) cylinder(h=15, r=6, $fn=64); }\n"
            "  translate([15, 10, -1]) cylinder(h=30, r=3, $fn=48);\n}\n")
    made = await cad.call("model_3d", {"name": "demo", "code": demo})
    assert made.success, made.error
    started = time.monotonic()
    r = await cad.call("render_3d", {"path": "models/demo.stl"})
    elapsed = time.monotonic() - started
    assert r.success, (r.error, r.output)
    expected = ["renders/demo_isometric.png", "renders/demo_front.png", "renders/demo_top.png"]
    assert r.metadata["renders"] == expected
    assert [img["path"] for img in r.metadata["images"]] == expected
    keep = os.environ.get("NAVI_CAD_KEEP")
    decoded = []
    for image, path in zip(r.metadata["images"], expected, strict=True):
        data = base64.b64decode(image["data_b64"])
        assert image["media_type"] == "image/png" and data == cad.ws.read_bytes(path)
        width, height, rows = decode_png(data)
        assert (width, height) == (800, 800) and len(rows) == 800
        decoded.append(rows)
        pixels = [row[i:i + 3] for row in rows[::4] for i in range(0, len(row), 12)]
        blue = sum(1 for p in pixels if p[2] > p[0] + 40)  # the model is drawn in blue
        white = sum(1 for p in pixels if min(p) > 245)
        assert 0.15 < blue / len(pixels) < 0.85, (path, blue / len(pixels))
        assert white / len(pixels) > 0.10, (path, white / len(pixels))
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cad.ws_path / path, Path(keep) / Path(path).name)
    # the top view looks through the bore: the middle pixel is background, not model
    assert min(decoded[2][400][400 * 3:400 * 3 + 3]) > 245
    # the front view does not: the bore is hidden inside the boss
    assert decoded[1][300][400 * 3 + 2] > decoded[1][300][400 * 3] + 40
    print(f"\nrender_3d 3 views: {elapsed:.2f} s wall, helper {r.metadata['render_ms']} ms")

    one = await cad.call("render_3d", {"path": "models/demo.stl", "views": ["right"]})
    assert one.success and one.metadata["renders"] == ["renders/demo_right.png"]
    missing = await cad.call("render_3d", {"path": "models/none.stl"})
    assert not missing.success and "models/none.stl" in (missing.error or "")
    garbage = cad.ws.write_bytes("models/garbage.stl", b"solid nothing here\n" * 3)
    bad = await cad.call("render_3d", {"path": garbage.path})
    assert not bad.success and "STL" in (bad.error or "")


async def test_pathological_models_time_out_or_run_out_of_memory(cad: CadRig) -> None:
    # exponential recursion: no memory growth, only time
    fib = "function fib(n) = n < 2 ? n : fib(n - 1) + fib(n - 2);\necho(fib(60));\ncube(1);\n"
    started = time.monotonic()
    r = await cad.call("model_3d", {"name": "fib", "code": fib}, timeout_s=2)
    assert time.monotonic() - started < 12
    assert not r.success and r.metadata["timed_out"] and r.metadata["timeout_s"] == 2
    assert r.error == "timed out after 2 s"
    assert cad.ws.read_bytes("models/fib.scad").decode() == fib
    # a huge $fn in a CSG operation: CGAL grinds until the timeout
    bore = ("difference() { cylinder(r=10, h=5, $fn=2000);\n"
            "  cylinder(r=5, h=20, center=true, $fn=2000); }\n")
    slow = await cad.call("model_3d", {"name": "bore", "code": bore}, timeout_s=2)
    assert not slow.success and slow.metadata["timed_out"], slow.error
    # a huge $fn on its own: the points do not fit in 512 MiB
    huge = await cad.call("model_3d", {"name": "huge", "code": "sphere(10, $fn=100000);"},
                          timeout_s=10)
    assert not huge.success and huge.metadata["oom_killed"] and not huge.metadata["timed_out"]
    assert huge.error == "killed: out of memory"
    assert [e.path for e in cad.ws.list("models")] == [
        "models/bore.scad", "models/fib.scad", "models/huge.scad"]
