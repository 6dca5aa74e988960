#!/usr/bin/python3
"""Runner shim of the tools-runner image: runs one user tool, inside the sandbox, once.

Protocol (the supervisor side is runtime/tools/user/tool.py):
- the tool file is mounted read-only at /opt/navi/tool.py (TOOL_PATH overrides, for tests);
- stdin carries the call's params as one JSON object;
- its argument (argv[1]) names the SHA-256 of the content that may run: the runner reads
  the file once, refuses
  it unless its SHA-256 is that, and executes exactly the bytes it hashed (never the path
  again), so what runs is what the audit intent's tool_hash names;
- stdout carries exactly one JSON line: {"ok": true, "result": "...", "sha256": "..."} or
  {"ok": false, "error": "...", "sha256": ...} (the hash of what ran, null if nothing was
  loaded); the exit code is 0 when a result line was written.

Before the tool is imported, file descriptor 1 is duplicated to a private, non-inheritable
descriptor and fd 1 (and `sys.stdout`) is pointed at stderr, so whatever the tool prints -
at import time, in execute, or from a child process - lands on stderr and cannot be taken
for the result. Only the standard library is used; the interpreter runs with -I (isolated:
no PYTHONPATH, no user site, the working directory is not on sys.path).
"""

import asyncio
import hashlib
import inspect
import json
import os
import sys
import traceback
import types

TOOL_PATH = os.environ.get("NAVI_TOOL_PATH", "/opt/navi/tool.py")
EXPECTED_SHA256 = sys.argv[1] if len(sys.argv) > 1 else None
MAX_TOOL_BYTES = 4 * 1024 * 1024
MAX_PARAMS_BYTES = 1024 * 1024
MAX_RESULT_CHARS = 512 * 1024


def _claim_stdout():
    """Keep the real stdout for the result; send everything else to stderr."""
    result_fd = os.dup(1)
    os.set_inheritable(result_fd, False)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(result_fd, "w", encoding="utf-8")


def _describe(exc):
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text[-2000:] or type(exc).__name__


def _read_params():
    raw = sys.stdin.buffer.read(MAX_PARAMS_BYTES + 1)
    if len(raw) > MAX_PARAMS_BYTES:
        raise ValueError(f"params larger than {MAX_PARAMS_BYTES} bytes")
    params = json.loads(raw.decode("utf-8") or "{}")
    if not isinstance(params, dict):
        raise ValueError("params must be a JSON object")
    return params


def _read_tool(path):
    """The tool's bytes and their SHA-256; refused unless it is the expected one."""
    with open(path, "rb") as fh:
        source = fh.read(MAX_TOOL_BYTES + 1)
    if len(source) > MAX_TOOL_BYTES:
        raise ValueError(f"tool file larger than {MAX_TOOL_BYTES} bytes")
    digest = hashlib.sha256(source).hexdigest()
    if EXPECTED_SHA256 is not None and digest != EXPECTED_SHA256:
        raise ValueError(f"tool content {digest} is not the approved {EXPECTED_SHA256}")
    return source, digest


def _load_tool(path, source):
    """Execute exactly ``source`` (the bytes that were hashed) as the tool's module."""
    module = types.ModuleType("navi_user_tool")
    module.__file__ = path
    sys.modules["navi_user_tool"] = module
    exec(compile(source, path, "exec"), module.__dict__)  # the tool, inside the sandbox
    return module


def _run(result_out):
    ran = None  # the SHA-256 of what was loaded

    def emit(obj):
        result_out.write(json.dumps({**obj, "sha256": ran}) + "\n")
        result_out.flush()

    try:
        params = _read_params()
    except Exception as exc:
        emit({"ok": False, "error": "bad params: " + _describe(exc)})
        return 0
    try:
        source, ran = _read_tool(TOOL_PATH)
    except Exception as exc:
        emit({"ok": False, "error": "tool refused: " + _describe(exc)})
        return 0
    try:
        module = _load_tool(TOOL_PATH, source)
    except BaseException as exc:  # SystemExit at import time is a load failure too
        traceback.print_exc()
        emit({"ok": False, "error": "tool failed to load: " + _describe(exc)})
        return 0
    execute = getattr(module, "execute", None)
    if not inspect.iscoroutinefunction(execute):
        emit({"ok": False, "error": "tool has no 'async def execute(params)'"})
        return 0
    try:
        result = asyncio.run(execute(params))
    except BaseException as exc:
        traceback.print_exc()
        emit({"ok": False, "error": "tool raised: " + _describe(exc)})
        return 0
    if not isinstance(result, str):
        try:
            result = json.dumps(result, ensure_ascii=False)
        except (TypeError, ValueError):
            result = str(result)
    if len(result) > MAX_RESULT_CHARS:
        result = result[:MAX_RESULT_CHARS] + "\n[... result truncated ...]"
    emit({"ok": True, "result": result})
    return 0


def main():
    sys.dont_write_bytecode = True
    result_out = _claim_stdout()
    try:
        code = _run(result_out)
    finally:
        sys.stderr.flush()
    os._exit(code)  # no atexit handlers or lingering threads of the tool after the result


if __name__ == "__main__":
    main()
