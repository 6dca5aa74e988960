"""The second-wave agent tools in real containers, through the registry and the Executor:
a PDF the sandbox made read back with read_document, terminal's cwd and timeout_s (clamped
to the policy's max, and a command past the policy's default), edit_file audited."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtime.errors import InvalidInput
from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from tests.docker.test_tools_exec import Rig, rig  # noqa: F401 - `rig`: the fixture
from tests.docker.tool_rig import PROJECT_ROOT, docker_tool_rig
from tests.fakes.calls import call

pytestmark = pytest.mark.docker

MAKE_PDF = """
import matplotlib
matplotlib.rcParams["pdf.fonttype"] = 42  # TrueType: the text stays extractable
import matplotlib.pyplot as plt
from matplotlib.backends.backend_pdf import PdfPages
with PdfPages("report.pdf") as pdf:
    for page in (1, 2):
        fig = plt.figure(figsize=(4, 3))
        fig.text(0.1, 0.5, f"Quarterly total {page * 21}")
        pdf.savefig(fig)
        plt.close(fig)
"""


async def test_read_document_extracts_a_pdf_the_sandbox_made(rig: Rig) -> None:  # noqa: F811
    reg = rig.services.registry
    made = await call(reg, "code_exec", {"language": "python", "code": MAKE_PDF}, rig.ctx())
    assert made.success, made
    doc = await call(reg, "read_document", {"path": "report.pdf"}, rig.ctx())
    assert doc.success, doc
    assert "Quarterly total 21" in doc.output and "Quarterly total 42" in doc.output
    assert doc.metadata["kind"] == "pdf"
    # the extraction was an execution: decided and audited like any other
    [intent] = await rig.audit.records(kind="intent", exec_id=doc.metadata["exec_id"])
    assert intent.tool == "read_document" and intent.image.startswith("navi/python")


async def test_terminal_cwd_stays_inside_the_workspace(rig: Rig) -> None:  # noqa: F811
    reg = rig.services.registry
    await call(reg, "filesystem", {"action": "write", "path": "proj/src/a.txt",
                                    "content": "x"}, rig.ctx())
    ran = await call(reg, "terminal", {"command": "pwd; ls", "cwd": "proj/src"}, rig.ctx())
    assert ran.success and ran.metadata["stdout"] == "/workspace/proj/src\na.txt\n"
    for bad in ("../", "/etc", "proj/../..", "proj/src/a.txt", "missing"):
        with pytest.raises(InvalidInput, match="cwd"):
            await call(reg, "terminal", {"command": "pwd", "cwd": bad}, rig.ctx())


async def test_terminal_timeout_is_clamped_and_said(rig: Rig) -> None:  # noqa: F811
    reg = rig.services.registry
    quick = await call(reg, "terminal", {"command": "echo ok", "timeout_s": 3000}, rig.ctx())
    assert quick.success and quick.metadata["timeout_s"] == 300  # default.yaml's max
    assert quick.output.startswith("[timeout: 300 s, the policy's maximum, not the 3000 s")
    short = await call(reg, "terminal", {"command": "sleep 20", "timeout_s": 1}, rig.ctx())
    assert not short.success and short.metadata["timed_out"] and short.metadata["timeout_s"] == 1


@pytest.fixture
async def short_default_rig(
    tmp_path: Path, backend: DockerBackend, backend_config: DockerBackendConfig,
    sandbox_image: str, runner_image: str,
) -> AsyncIterator[Rig]:
    """default.yaml with a 2 s default timeout (its max stays 300 s)."""
    text = (PROJECT_ROOT / "policies" / "default.yaml").read_text()
    assert "\n    timeout_s: 30\n" in text
    policy = tmp_path / "short-default.yaml"
    policy.write_text(text.replace("\n    timeout_s: 30\n", "\n    timeout_s: 2\n", 1))
    images = {"python": sandbox_image, "tools-runner": runner_image}
    async with docker_tool_rig(tmp_path, backend, backend_config, images=images, user="tok",
                               policy=str(policy)) as made:  # an absolute path: this one
        yield made


async def test_terminal_runs_past_the_default_timeout_when_asked(short_default_rig: Rig
                                                                  ) -> None:
    """The same command times out at the policy's default and runs to its end when the
    call asks for more (a 2 s default here instead of default.yaml's 30 s: the same rule,
    seconds instead of half a minute)."""
    reg, ctx = short_default_rig.services.registry, short_default_rig.ctx
    command = "sleep 4; echo finished"
    cut = await call(reg, "terminal", {"command": command}, ctx())
    assert not cut.success and cut.metadata["timed_out"] and cut.metadata["timeout_s"] == 2
    started = time.monotonic()
    ran = await call(reg, "terminal", {"command": command, "timeout_s": 20}, ctx())
    assert ran.success and ran.metadata["stdout"] == "finished\n", ran
    assert ran.metadata["timeout_s"] == 20 and time.monotonic() - started >= 4


async def test_edit_file_is_audited_before_it_writes(rig: Rig) -> None:  # noqa: F811
    reg = rig.services.registry
    await call(reg, "filesystem", {"action": "write", "path": "cfg.ini",
                                    "content": "debug = true\n"}, rig.ctx())
    edited = await call(reg, "edit_file", {"path": "cfg.ini", "old": "true", "new": "false"},
                              rig.ctx())
    assert edited.success
    writes = [r for r in await rig.audit.records(kind="action") if r.object == "cfg.ini"]
    assert [r.detail for r in writes][-1] == "edit_file"
    assert rig.ws.read_bytes("cfg.ini") == b"debug = false\n"
