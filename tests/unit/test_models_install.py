"""The embedded model installed ahead of time: scrubbed environment, phases, notices, CLI."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runtime.agent.llm.embedded import EmbeddedServer, pip_phase
from runtime.agent.llm.embedded_confine import CHILD_ENV, base_python, prepare
from runtime.agent.llm.fallback import FallbackBackend
from runtime.agent.llm.types import Notice
from runtime.cli import app

SECRET = "navi-admin-secret-for-this-test-only"


async def test_build_steps_never_see_the_supervisors_secrets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAVI_ADMIN_TOKEN", SECRET)
    monkeypatch.setenv("NAVI_OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("SOME_CLOUD_TOKEN", SECRET)
    lines: list[str] = []

    async def on_line(line: str) -> None:
        lines.append(line)

    base = Path(tempfile.mkdtemp(prefix="navi-models-"))  # pytest's are 0700: out of reach
    try:
        os.chmod(base, 0o755)
        server = EmbeddedServer(base / "embedded")
        prepare(server.directory, server.user(), fresh=True)
        log = server.directory / "install.log"
        code = "import json, os; print(json.dumps(dict(os.environ)))"
        await server._run([base_python(server.user()), "-c", code], log, 30,  # noqa: SLF001
                          on_line)
        seen = json.loads(lines[0])
        assert SECRET not in json.dumps(seen) and SECRET not in log.read_text()
        assert "PATH" in seen and set(seen) <= set(CHILD_ENV) | {
            "HOME", "TMPDIR", "PIP_CACHE_DIR", "PYTHONNOUSERSITE", "PWD"}  # PWD: sh (umask)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_pip_output_names_the_phase() -> None:
    assert pip_phase("Collecting llama-cpp-python==0.3.16") == "download"
    assert pip_phase("Building wheels for collected packages: llama-cpp-python") == "build"
    assert pip_phase("Installing collected packages: numpy") == "install"
    assert pip_phase("  Stored in directory: /root/.cache") is None


class Preparing:
    """Stands in for the embedded server: reports an install's phases, then serves."""

    def installed(self) -> bool:
        return False

    async def ensure(self, on_progress) -> str:  # noqa: ANN001
        for phase, fraction in (("download", 0.05), ("build", 0.5), ("ready", 1.0)):
            on_progress(phase, fraction, f"{phase}…")
        return "http://127.0.0.1:9/v1"


async def test_notices_carry_the_phase_and_progress() -> None:
    backend = FallbackBackend(primary=None, embedded=Preparing())  # type: ignore[arg-type]
    steps = [step async for step in backend._ready()]  # noqa: SLF001
    notices = [s for s in steps if isinstance(s, Notice)]
    assert [(n.phase, n.progress) for n in notices] == [
        ("download", 0.05), ("build", 0.5), ("ready", 1.0)]
    assert steps[-1] == "http://127.0.0.1:9/v1"


def test_models_status_and_install_when_installed(tmp_path: Path) -> None:
    # named, not the default: under pytest's 0700 temp dir the default would be the
    # system's cache (the model's uid cannot reach tmp_path), and an install there builds
    runner = CliRunner(env={"NAVI_EMBEDDED_DIR": str(tmp_path / "embedded")})
    done = runner.invoke(app, ["models", "status", "--data-dir", str(tmp_path)])
    assert done.exit_code == 0 and "not installed" in done.output
    server = EmbeddedServer((tmp_path / "embedded").resolve())
    server.python.parent.mkdir(parents=True)
    server.python.write_text("")
    server.model_path.write_text("")
    from runtime.agent.llm.embedded import PACKAGES
    server.stamp.write_text(json.dumps({"packages": list(PACKAGES), "sha256": "0" * 64,
                                        "model": str(server.model_path)}))
    assert server.installed()
    done = runner.invoke(app, ["models", "install", "--data-dir", str(tmp_path)])
    assert done.exit_code == 0 and done.output.startswith("installed:"), done.output
