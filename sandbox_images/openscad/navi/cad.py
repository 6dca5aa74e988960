"""The one program the openscad image runs for `model_3d`, `scad_lint` and `render_3d`.

Protocol: one JSON request on stdin, one JSON reply line on stdout; nothing else writes to
stdout. OpenSCAD's own output goes to stderr as it comes, so the supervisor streams it live
and parses warnings and errors (with line numbers) from it.

Before it reads any input file, the process confines itself and every child with Landlock
(`landlock.py`): read-write only the workspace and `/tmp`, read-only the system paths that
OpenSCAD, Python, numpy, trimesh and matplotlib need to start. So `import()`, `include`,
`use` and `surface()` reach the session's files and nothing else of the image.

Requests (paths are workspace-relative, chosen and validated by the supervisor):
    {"op": "compile", "code": "...", "source": "models/a.scad", "output": "models/a.stl",
     "max_output_bytes": n}          (writes `code` to `source`, compiles it to `output`)
    {"op": "lint", "code": "..."}
    {"op": "render", "path": "models/a.stl", "views": ["isometric"], "outputs": ["renders/…"],
     "width": 800, "height": 800, "max_input_bytes": n, "max_faces": n}
Reply: {"ok": true, ...} or {"ok": false, "error": "..."}.
Exit codes: 0 done (model built, lint clean, views drawn), 1 the model failed (the reply
says why), 2 bad request, 3 confinement unavailable (fail closed). A reply is always written.
"""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import landlock  # noqa: E402

WORKSPACE = "/workspace"
LINT_DIR = "/tmp/navi-lint"
OPENSCADPATH = "/workspace/models:/workspace"
EXIT_OK, EXIT_FAILED, EXIT_BAD_REQUEST, EXIT_NO_CONFINEMENT = 0, 1, 2, 3
REL_PATH = re.compile(r"^(?!/)(?!.*(?:^|/)\.\.?(?:/|$))[A-Za-z0-9_./ -]{1,512}$")

SYSTEM_READ = (
    ("/usr/lib", landlock.READ_EXEC),  # shared libraries, python3.11, dist-packages, Qt
    ("/usr/local/lib", landlock.READ),  # trimesh (unpacked wheel)
    ("/usr/bin/openscad", landlock.READ_EXEC),
    ("/usr/share/openscad", landlock.READ),
    ("/usr/share/fonts", landlock.READ),
    ("/usr/share/fontconfig", landlock.READ),
    ("/usr/share/matplotlib", landlock.READ),
    ("/etc/fonts", landlock.READ),
    ("/etc/ld.so.cache", landlock.READ),
    ("/etc/matplotlibrc", landlock.READ),
    ("/var/cache/fontconfig", landlock.READ),
    ("/opt/navi", landlock.READ),
    ("/dev/null", landlock.READ_FILE | landlock.WRITE_FILE),
    ("/dev/urandom", landlock.READ_FILE),
)
RULES = ((WORKSPACE, landlock.WRITE), ("/tmp", landlock.WRITE), *SYSTEM_READ)


class RequestError(ValueError):
    """The supervisor sent something this program does not accept."""


def reply(**fields: object) -> int:
    """Write the one reply line; the exit code to end with: 0 done, 1 the model failed."""
    sys.stdout.write(json.dumps(fields, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return EXIT_OK if fields.get("ok") else EXIT_FAILED


def rel_path(value: object, suffix: str) -> str:
    if not isinstance(value, str) or not REL_PATH.match(value) or not value.endswith(suffix):
        raise RequestError(f"bad workspace path {value!r}")
    return value


def number(request: dict, key: str) -> int:
    value = request.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise RequestError(f"{key} must be a positive integer")
    return value


def open_dir(rel_dir: str, *, create: bool) -> int:
    """An fd of `rel_dir` below the workspace, reached without following any symlink;
    with `create`, missing directories are made."""
    fd = os.open(WORKSPACE, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for part in filter(None, rel_dir.split("/")):
        try:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd


def read_file(rel: str, limit: int) -> bytes:
    """At most `limit` + 1 bytes of a regular workspace file (no symlinks on the way)."""
    head, _, name = rel.rpartition("/")
    try:
        dir_fd = open_dir(head, create=False)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=dir_fd)  # O_NONBLOCK: a planted FIFO must not hang us
        finally:
            os.close(dir_fd)
    except OSError as exc:
        why = "a symlink (not followed)" if exc.errno == errno.ELOOP else exc.strerror
        raise OSError(exc.errno, why, rel) from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", rel)
        return fh.read(limit + 1)


def publish(tmp_path: str, rel: str) -> int:
    """Copy a finished file from /tmp into the workspace: a temporary name, then a rename,
    both relative to the target directory's fd."""
    head, _, name = rel.rpartition("/")
    staging = f".{name}.part"
    dir_fd = open_dir(head, create=True)
    try:
        out = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                      | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
        size = 0
        with open(tmp_path, "rb") as src, os.fdopen(out, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
                size += len(chunk)
        os.replace(staging, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    return size


def run_openscad(argv: list[str], *, cwd: str, max_output_bytes: int) -> tuple[int, int]:
    """Run OpenSCAD, its stdout and stderr passed on to our stderr line by line; returns its
    exit status and the number of ERROR lines it printed."""

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_output_bytes, max_output_bytes))

    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
           "QT_QPA_PLATFORM": "offscreen", "OPENSCADPATH": OPENSCADPATH}
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=limits)
    assert proc.stdout is not None
    err = sys.stderr.buffer
    errors = 0
    for line in proc.stdout:
        errors += line.startswith((b"ERROR:", b"EXPORT-ERROR:"))
        err.write(line)
        err.flush()
    return proc.wait(), errors


def mesh_stats(path: str) -> dict:
    import trimesh

    mesh = trimesh.load(path, file_type="stl", force="mesh")
    lo, hi = mesh.bounds if len(mesh.faces) else ([0.0] * 3, [0.0] * 3)
    watertight = bool(mesh.is_watertight)
    return {
        "triangles": int(len(mesh.faces)),
        "vertices": int(len(mesh.vertices)),
        "bbox_min": [round(float(v), 6) for v in lo],
        "bbox_max": [round(float(v), 6) for v in hi],
        "size": [round(float(b - a), 6) for a, b in zip(lo, hi, strict=True)],
        "volume": round(float(mesh.volume), 6),
        "area": round(float(mesh.area), 6),
        "watertight": watertight,
        "winding_consistent": bool(mesh.is_winding_consistent),
    }


def source_code(request: dict) -> str:
    code = request.get("code")
    if not isinstance(code, str) or "\x00" in code:
        raise RequestError("code must be a string without NUL bytes")
    return code


def do_compile(request: dict) -> int:
    code = source_code(request)
    source = rel_path(request.get("source"), ".scad")
    output = rel_path(request.get("output"), ".stl")
    limit = number(request, "max_output_bytes")
    tmp_scad, tmp_stl = "/tmp/navi-model.scad", "/tmp/navi-model.stl"
    with open(tmp_scad, "w", encoding="utf-8") as fh:
        fh.write(code)
    publish(tmp_scad, source)
    start = time.monotonic()
    # Run where the model is: OpenSCAD names files relative to the working directory in
    # some messages and relative to the main file in others; this way both agree.
    folder, _, filename = source.rpartition("/")
    status, _ = run_openscad(
        ["openscad", "-o", tmp_stl, "--export-format", "binstl", filename],
        cwd=os.path.join(WORKSPACE, folder), max_output_bytes=limit,
    )
    compile_ms = int((time.monotonic() - start) * 1000)
    made = os.path.exists(tmp_stl)
    if status == -signal.SIGXFSZ or (made and os.path.getsize(tmp_stl) >= limit):
        return reply(ok=False, error=f"the STL is larger than the limit of {limit} bytes",
                     compile_ms=compile_ms, openscad_exit=status)
    if status == -signal.SIGKILL:
        return reply(ok=False, error="OpenSCAD was killed (SIGKILL), most likely because it "
                     "ran out of memory", compile_ms=compile_ms, openscad_exit=status,
                     killed=True)
    if status != 0 or not made:
        return reply(ok=False, error=f"OpenSCAD failed (exit code {status})",
                     compile_ms=compile_ms, openscad_exit=status)
    start = time.monotonic()
    stats = mesh_stats(tmp_stl)
    size = publish(tmp_stl, output)
    return reply(ok=True, stats=stats, stl_bytes=size, compile_ms=compile_ms,
                 analyse_ms=int((time.monotonic() - start) * 1000))


def do_lint(request: dict) -> int:
    code = source_code(request)
    os.makedirs(LINT_DIR, exist_ok=True)
    with open(f"{LINT_DIR}/input.scad", "w", encoding="utf-8") as fh:
        fh.write(code)
    start = time.monotonic()
    # .csg export evaluates the whole program (warnings, assertions, echo) without CGAL.
    status, errors = run_openscad(["openscad", "-o", f"{LINT_DIR}/out.csg", "input.scad"],
                                  cwd=LINT_DIR, max_output_bytes=16 << 20)
    lint_ms = int((time.monotonic() - start) * 1000)
    clean = status == 0 and errors == 0
    reply(ok=True, clean=clean, errors=errors, openscad_exit=status, lint_ms=lint_ms)
    return EXIT_OK if clean else EXIT_FAILED


def do_render(request: dict) -> int:
    import render

    path = rel_path(request.get("path"), ".stl")
    views = request.get("views")
    outputs = request.get("outputs")
    if (not isinstance(views, list) or not isinstance(outputs, list)
            or not 1 <= len(views) == len(outputs) <= 3
            or any(v not in render.VIEWS for v in views)):
        raise RequestError("views and outputs must be lists of 1 to 3 known views and paths")
    outputs = [rel_path(o, ".png") for o in outputs]
    width, height = number(request, "width"), number(request, "height")
    if width > 4096 or height > 4096:
        raise RequestError("width and height are at most 4096")
    data = read_file(path, number(request, "max_input_bytes"))
    if len(data) > request["max_input_bytes"]:
        return reply(ok=False, error=f"{path} is larger than {request['max_input_bytes']} bytes")
    start = time.monotonic()
    try:
        mesh = render.load_mesh(data)
    except ValueError as exc:
        return reply(ok=False, error=f"{path}: {exc}")
    if len(mesh.faces) > number(request, "max_faces"):
        return reply(ok=False, error=f"{path} has {len(mesh.faces)} triangles; render_3d draws "
                     f"at most {request['max_faces']}")
    done = []
    for view, out in zip(views, outputs, strict=True):
        tmp_png = f"/tmp/navi-{view}.png"
        render.render_view(mesh, view, tmp_png, width, height)
        done.append({"view": view, "path": out, "bytes": publish(tmp_png, out)})
    return reply(ok=True, views=done, triangles=int(len(mesh.faces)),
                 render_ms=int((time.monotonic() - start) * 1000))


OPS = {"compile": do_compile, "lint": do_lint, "render": do_render}


def main() -> int:
    try:
        request = json.loads(sys.stdin.buffer.read(4 << 20))
        if not isinstance(request, dict) or request.get("op") not in OPS:
            raise RequestError("the request must be a JSON object with a known op")
    except (ValueError, RequestError) as exc:
        reply(ok=False, error=f"bad request: {exc}")
        return EXIT_BAD_REQUEST
    try:
        landlock.restrict(RULES)
    except (landlock.LandlockUnavailable, OSError) as exc:
        reply(ok=False, error=f"file confinement unavailable: {exc}", confinement=False)
        return EXIT_NO_CONFINEMENT
    try:
        return OPS[request["op"]](request)
    except RequestError as exc:
        reply(ok=False, error=f"bad request: {exc}")
        return EXIT_BAD_REQUEST
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        return reply(ok=False, error=f"{exc.strerror or type(exc).__name__}{where}")


if __name__ == "__main__":
    sys.exit(main())
