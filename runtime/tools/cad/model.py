"""`model_3d` and `scad_lint`: OpenSCAD source -> STL (with mesh facts), or diagnostics only.

Both send the source to the openscad image's helper (`protocol.run_cad`), so the file is
written, compiled and measured inside a fresh hardened container, after the policy decided
and the audit recorded the intent. `model_3d` writes `models/NAME.scad` and
`models/NAME.stl`; its facts (triangles, bounding box, volume, watertightness) are computed
by trimesh in the container. `scad_lint` evaluates the program to a CSG tree (all warnings,
assertions and echoes, with line numbers) without computing or exporting a mesh.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from pydantic import BaseModel, Field, field_validator

from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult
from runtime.tools.cad.diagnostics import Diagnostic, counts, parse_log, summary
from runtime.tools.cad.protocol import failure, run_cad
from runtime.tools.sandboxed import exec_metadata, with_run

MAX_CODE_BYTES = 512 * 1024
MAX_STL_BYTES = 48 * 1024 * 1024
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
MODELS_DIR = "models"
LINT_DIR = "/tmp/navi-lint"


def check_code(value: str) -> str:
    if "\x00" in value:
        raise ValueError("code contains a NUL byte")
    if len(value.encode("utf-8", errors="surrogatepass")) > MAX_CODE_BYTES:
        raise ValueError(f"code is larger than {MAX_CODE_BYTES} bytes")
    return value


class Model3DParams(ToolParams):
    code: str = Field(min_length=1, description="OpenSCAD source of the model")
    name: str = Field(
        min_length=1, max_length=70,
        description="model name: letters, digits, _ and - (at most 64); the tool writes "
        "models/NAME.scad and models/NAME.stl",
    )

    @field_validator("code")
    @classmethod
    def _code(cls, value: str) -> str:
        return check_code(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        value = re.sub(r"\.(scad|stl)$", "", value, flags=re.IGNORECASE)
        if not MODEL_NAME.fullmatch(value):
            raise ValueError("use 1-64 letters, digits, '_' or '-' (starting with a letter "
                             "or digit), without a directory")
        return value


class ScadLintParams(ToolParams):
    code: str = Field(min_length=1, description="OpenSCAD source to check")

    @field_validator("code")
    @classmethod
    def _code(cls, value: str) -> str:
        return check_code(value)


class MeshStats(BaseModel):
    triangles: int
    vertices: int
    bbox_min: list[float]
    bbox_max: list[float]
    size: list[float]
    volume: float
    area: float
    watertight: bool
    winding_consistent: bool


def _num(v: float) -> str:
    return f"{v:.6g}"


def describe_mesh(stl_path: str, stl_bytes: int, compile_ms: int, mesh: MeshStats) -> str:
    lines = [
        f"{stl_path} written ({stl_bytes} bytes; OpenSCAD took {compile_ms / 1000:.2f} s)",
        f"triangles {mesh.triangles}, vertices {mesh.vertices}",
        f"bounding box min [{', '.join(map(_num, mesh.bbox_min))}] "
        f"max [{', '.join(map(_num, mesh.bbox_max))}], "
        f"size {' x '.join(map(_num, mesh.size))}",
        f"volume {_num(mesh.volume)}, surface area {_num(mesh.area)}",
    ]
    if mesh.watertight:
        lines.append("watertight: yes (a closed solid)")
    else:
        lines.append("watertight: NO - the mesh has holes or non-manifold edges; the volume "
                     "is unreliable and slicers may reject it")
    return "\n".join(lines)


class Model3DTool(BuiltinTool[Model3DParams]):
    name = "model_3d"
    description = (
        "Compile OpenSCAD source into a 3D model in a sandbox: writes models/NAME.scad and "
        "models/NAME.stl; returns triangle count, bounding box, volume, watertightness and "
        "OpenSCAD's warnings (with line numbers)."
    )
    group = "group:cad"
    Params = Model3DParams
    runs_in_sandbox: ClassVar[bool] = True

    async def execute(self, params: Model3DParams, ctx: ToolContext) -> ToolResult:
        scad = f"{MODELS_DIR}/{params.name}.scad"
        stl = f"{MODELS_DIR}/{params.name}.stl"
        request = {"op": "compile", "code": params.code, "source": scad, "output": stl,
                   "max_output_bytes": MAX_STL_BYTES}
        outcome, reply = await run_cad(ctx, self.action(params.model_dump(), ctx), request)
        log = outcome.result.stderr.decode("utf-8", errors="replace")
        diagnostics = parse_log(log, base_dir=f"/workspace/{MODELS_DIR}",
                                main_file=f"/workspace/{scad}")
        extra: dict[str, Any] = {"scad_path": scad, "stl_path": stl,
                                 "diagnostics": [d.model_dump() for d in diagnostics],
                                 **counts(diagnostics)}
        report = summary(diagnostics)
        if reply is None:
            return with_run(failure(outcome, f"OpenSCAD log:\n{report}", **extra), outcome)
        meta = {**exec_metadata(outcome), **extra, "compile_ms": reply.field("compile_ms")}
        if not reply.ok:
            error = reply.error or "compilation failed"
            return with_run(ToolResult.fail(
                error, output=f"{scad} saved; no STL: {error}\n{report}", **meta), outcome)
        mesh = MeshStats.model_validate(reply.field("stats"))
        stl_bytes = int(reply.field("stl_bytes", 0))
        text = describe_mesh(stl, stl_bytes, int(reply.field("compile_ms", 0)), mesh)
        return with_run(ToolResult.ok(f"{text}\nOpenSCAD: {report}", **meta,
                                      mesh=mesh.model_dump(), stl_bytes=stl_bytes), outcome)


class ScadLintTool(BuiltinTool[ScadLintParams]):
    name = "scad_lint"
    description = (
        "Check OpenSCAD source without building a mesh: syntax errors, unknown variables, "
        "modules and functions, failed assertions and echo output, with line numbers."
    )
    group = "group:cad"
    Params = ScadLintParams
    runs_in_sandbox: ClassVar[bool] = True

    async def execute(self, params: ScadLintParams, ctx: ToolContext) -> ToolResult:
        request = {"op": "lint", "code": params.code}
        outcome, reply = await run_cad(ctx, self.action(params.model_dump(), ctx), request)
        log = outcome.result.stderr.decode("utf-8", errors="replace")
        diagnostics = parse_log(log, base_dir=LINT_DIR, main_file=f"{LINT_DIR}/input.scad")
        extra = {"diagnostics": [d.model_dump() for d in diagnostics], **counts(diagnostics)}
        report = summary(diagnostics)
        if reply is None:
            return with_run(failure(outcome, report, **extra), outcome)
        meta = {**exec_metadata(outcome), **extra, "lint_ms": reply.field("lint_ms")}
        if not reply.ok:
            return with_run(ToolResult.fail(reply.error or "lint failed", output=report,
                                            **meta), outcome)
        errors = extra["errors"]
        if errors or reply.field("openscad_exit") not in (0, None):
            return with_run(ToolResult.fail(
                _lint_error(diagnostics, reply.field("openscad_exit")), output=report, **meta),
                outcome)
        return with_run(ToolResult.ok(report if diagnostics else "no errors or warnings",
                                      **meta), outcome)


def _lint_error(diagnostics: list[Diagnostic], exit_code: Any) -> str:
    errors = [d for d in diagnostics if d.severity == "error"]
    if not errors:
        return f"OpenSCAD failed (exit code {exit_code})"
    first = errors[0].render()
    return f"{len(errors)} error{'s' if len(errors) != 1 else ''}; first: {first}"
