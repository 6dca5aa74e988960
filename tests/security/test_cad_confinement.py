"""OpenSCAD reaches only the session workspace: `import()`, `include`, `use`, `surface()`
and a planted symlink cannot open anything else, not even the image's own files.

The container keeps the host out; Landlock (applied by the helper before OpenSCAD starts)
keeps OpenSCAD inside the workspace. Without Landlock the first test goes red: OpenSCAD
then opens `/etc/passwd` and stops with a parser error instead of "can't open" (tried with
an image whose helper skips `landlock.restrict`, given as `NAVI_TEST_OPENSCAD_IMAGE`). The
second test covers the helper's own reads (no symlink, no FIFO), not Landlock.
"""

from __future__ import annotations

import json
import os

import pytest

from runtime.errors import InvalidInput
from tests.docker.test_cad_tools import CadRig, cad, openscad_image  # noqa: F401

pytestmark = pytest.mark.docker

SECRETS = ("root:x:0:0", "nobody:x:65534", "nameserver", "localhost")

MALICIOUS = """include </etc/passwd>
use </etc/hosts>
include <../../../../../../etc/resolv.conf>
import("/etc/passwd");
surface(file="/etc/passwd");
import("leak.stl");
include <leak.scad>
cube(1);
"""


def everything(result: object) -> str:
    return json.dumps(result.model_dump(), default=str)  # type: ignore[attr-defined]


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked"


async def test_cant_open_files_outside_the_workspace(cad: CadRig) -> None:  # noqa: F811
    models = cad.ws_path / "models"
    models.mkdir()
    os.chown(models, 65534, 65534)
    os.symlink("/etc/passwd", models / "leak.stl")
    os.symlink("/etc/passwd", models / "leak.scad")

    r = await cad.call("model_3d", {"name": "evil", "code": MALICIOUS})
    text = everything(r)
    assert_no_secret(text)
    # the include that fails does not stop the model: the cube is still built
    assert r.success, (r.error, r.metadata["stderr"])
    assert r.metadata["mesh"]["triangles"] == 12
    warnings = [d["message"] for d in r.metadata["diagnostics"] if d["severity"] == "warning"]
    assert "Can't open include file '/etc/passwd'." in warnings
    assert "Can't open library file '/etc/hosts'" in warnings
    assert any(w.startswith("Can't open include file") and "resolv.conf" in w for w in warnings)
    assert "The file '/etc/passwd' couldn't be opened." in warnings  # surface()
    # import() refuses a name without a mesh extension before opening anything
    assert any(d["severity"] == "error" and d["message"].startswith("Unsupported file format")
               and d["line"] == 4 for d in r.metadata["diagnostics"])
    assert any(w.startswith("Can't open import file") and "leak.stl" in w for w in warnings)
    assert any(w.startswith("Can't open include file") and "leak.scad" in w for w in warnings)
    # nothing was parsed or imported from those files
    assert "Parser error" not in text and "parse" not in r.metadata["stderr"].lower()

    lint = await cad.call("scad_lint", {"code": "include </etc/passwd>\ncube(1);\n"})
    assert lint.success and "Can't open include file '/etc/passwd'." in lint.output
    assert_no_secret(everything(lint))


async def test_cant_render_a_file_outside_the_workspace(cad: CadRig) -> None:  # noqa: F811
    for path in ("../etc/passwd.stl", "/etc/passwd.stl", "models/../../x.stl", "a\x00.stl"):
        with pytest.raises(InvalidInput):
            await cad.call("render_3d", {"path": path})
    models = cad.ws_path / "models"
    models.mkdir()
    os.symlink("/etc/passwd", models / "evil.stl")
    os.mkfifo(models / "fifo.stl")
    evil = await cad.call("render_3d", {"path": "models/evil.stl"})
    assert not evil.success and "symlink" in (evil.error or ""), evil.error
    assert_no_secret(everything(evil))
    fifo = await cad.call("render_3d", {"path": "models/fifo.stl"}, timeout_s=10)
    assert not fifo.success and not fifo.metadata["timed_out"]
    assert "not a regular file" in (fifo.error or "")
