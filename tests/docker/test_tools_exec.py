"""Every sandboxed built-in and the user-tool lifecycle, end to end: registry -> Executor
(real policy, real audit file) -> DockerBackend -> a real hardened container."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtime.errors import NotFound
from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.models import OutputChunk
from tests.docker.tool_rig import DockerToolRig, docker_tool_rig
from tests.fakes.calls import call

pytestmark = pytest.mark.docker

Rig = DockerToolRig


@pytest.fixture
async def rig(
    tmp_path: Path, backend: DockerBackend, backend_config: DockerBackendConfig,
    sandbox_image: str, runner_image: str,
) -> AsyncIterator[Rig]:
    images = {"python": sandbox_image, "tools-runner": runner_image}
    async with docker_tool_rig(tmp_path, backend, backend_config, images=images,
                               user="tok") as made:
        yield made


async def test_code_exec_python_streams_and_shares_the_workspace(rig: Rig) -> None:
    chunks: list[OutputChunk] = []

    async def on_output(chunk: OutputChunk) -> None:
        chunks.append(chunk)

    reg = rig.services.registry
    code = ("import sys\nprint('out')\nprint('err', file=sys.stderr)\n"
            "open('made.txt', 'w').write('hi')")
    r = await call(reg, "code_exec", {"language": "python", "code": code},
                         rig.ctx(on_output=on_output))
    assert r.success, r
    assert r.metadata["stdout"] == "out\n" and r.metadata["stderr"] == "err\n"
    assert b"".join(c.data for c in chunks if c.stream == "stdout") == b"out\n"
    read = await call(reg, "filesystem", {"action": "read", "path": "made.txt"}, rig.ctx())
    assert read.output == "hi"
    [intent] = await rig.audit.records(kind="intent", exec_id=r.metadata["exec_id"])
    assert intent.tool == "code_exec" and intent.rule == "profiles.developer.allow[group:exec]"


async def test_code_exec_bash_terminal_exit_codes_and_timeout(rig: Rig) -> None:
    reg = rig.services.registry
    await call(reg, "filesystem", {"action": "write", "path": "in.txt", "content": "b\na\n"},
                     rig.ctx())
    sh = await call(reg, "code_exec", {"language": "bash", "code": "sort in.txt; id -u"},
                          rig.ctx())
    assert sh.success and sh.metadata["stdout"] == "a\nb\n65534\n"
    term = await call(reg, "terminal", {"command": "echo $HOME; exit 4"}, rig.ctx())
    assert not term.success and term.metadata["exit_code"] == 4 and term.error == "exit code 4"
    assert term.metadata["stdout"] == "/tmp\n"
    slow = await call(reg, "terminal", {"command": "sleep 30"}, rig.ctx(timeout_s=1))
    assert not slow.success and slow.metadata["timed_out"] and slow.metadata["timeout_s"] == 1


async def test_image_view_of_a_png_made_in_the_sandbox(rig: Rig) -> None:
    code = (
        "import struct, zlib\n"
        "def chunk(t, d):\n"
        "    c = struct.pack('>I', len(d)) + t + d\n"
        "    return c + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)\n"
        "raw = b'\\x00\\xff\\x00\\x00'\n"
        "png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0,"
        " 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')\n"
        "open('dot.png', 'wb').write(png)\n"
    )
    reg = rig.services.registry
    made = await call(reg, "code_exec", {"language": "python", "code": code}, rig.ctx())
    assert made.success, made
    r = await call(reg, "image_view", {"path": "dot.png"}, rig.ctx())
    assert r.success and r.metadata["images"][0]["media_type"] == "image/png"


SHOUT = '''
name = "shout"
description = "Upper-case a text."
parameters = {"type": "object", "properties": {"text": {"type": "string"}},
              "required": ["text"], "additionalProperties": False}

print("loaded")  # goes to stderr, never into the result

async def execute(params):
    print("shouting")
    return params["text"].upper() + "!"
'''

DIVIDE = '''
name = "divide"
description = "a / b"
parameters = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
              "required": ["a", "b"]}

async def execute(params):
    return str(params["a"] / params["b"])
'''


async def test_user_tool_lifecycle_end_to_end(rig: Rig) -> None:
    reg = rig.services.registry
    ctx = rig.ctx()
    await call(reg, "list_tools", {}, ctx)
    wrote = await call(reg, "write_tool", {"name": "shout", "code": SHOUT}, ctx)
    assert wrote.success, wrote
    tested = await call(reg, "test_tool", {"name": "shout", "params": {"text": "hi"}}, ctx)
    assert tested.success and tested.output == "HI!", tested
    assert "shouting" in tested.metadata["stderr"] and "loaded" in tested.metadata["stderr"]
    spec = await reg.spec("shout", ctx.subject)  # callable at once: no reload_tools
    assert spec.group == "group:user_tools" and spec.parameters["required"] == ["text"]
    r = await call(reg, "shout", {"text": "hello"}, ctx)
    assert r.success and r.output == "HELLO!" and r.metadata["exit_code"] == 0
    [intent] = await rig.audit.records(kind="intent", exec_id=r.metadata["exec_id"])
    assert intent.tool_hash == wrote.metadata["sha256"]
    assert intent.image == rig.executor.resolve_image("tools-runner")

    await call(reg, "write_tool", {"name": "divide", "code": DIVIDE}, ctx)
    await call(reg, "reload_tools", {}, ctx)
    assert (await call(reg, "divide", {"a": 1, "b": 4}, ctx)).output == "0.25"
    zero = await call(reg, "divide", {"a": 1, "b": 0}, ctx)
    assert not zero.success and zero.error == "tool raised: ZeroDivisionError: division by zero"
    assert "Traceback" in zero.output

    await call(reg, "delete_tool", {"name": "divide"}, ctx)
    with pytest.raises(NotFound):
        await call(reg, "divide", {"a": 1, "b": 2}, ctx)


async def test_shipped_tool_reads_a_session_file(rig: Rig) -> None:
    reg = rig.services.registry
    ctx = rig.ctx()
    await call(reg, "filesystem", {"action": "write", "path": "doc.txt",
                                    "content": "one two\nthree\n"}, ctx)
    r = await call(reg, "word_count", {"path": "doc.txt"}, ctx)
    assert r.success and r.output == "lines=2 words=3 chars=14", r
    h = await call(reg, "hash_text", {"text": "abc", "algorithm": "md5"}, ctx)
    assert h.output == "900150983cd24fb0d6963f7d28e17f72"
    j = await call(reg, "json_format", {"text": '{"b":1,"a":[1,2]}', "minify": True,
                                         "sort_keys": True}, ctx)
    assert json.loads(j.output) == {"a": [1, 2], "b": 1}


async def test_a_tool_broken_at_runtime_fails_alone(rig: Rig) -> None:
    reg = rig.services.registry
    ctx = rig.ctx()
    crash = SHOUT.replace('"shout"', '"crash"').replace('print("loaded")', "import nope_missing")
    await call(reg, "write_tool", {"name": "crash", "code": crash}, ctx)
    await call(reg, "write_tool", {"name": "shout", "code": SHOUT}, ctx)
    await call(reg, "reload_tools", {}, ctx)
    bad = await call(reg, "crash", {"text": "x"}, ctx)
    assert not bad.success and bad.error is not None
    assert bad.error.startswith("tool failed to load: ModuleNotFoundError")
    good = await call(reg, "shout", {"text": "x"}, ctx)
    assert good.success and good.output == "X!"
