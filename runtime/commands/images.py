"""`navi images build|list`: the sandbox images, built offline from ``sandbox_images/``.

Progress goes to stderr (builds take minutes), results to stdout; errors are one line on
stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from runtime.config import Settings
from runtime.errors import NaviError
from runtime.logging import configure_logging
from runtime.sandbox.docker.images import build_images, connect, list_images

app = typer.Typer(help="Build and list the sandbox images.", no_args_is_help=True)


def _settings() -> Settings:
    settings = Settings()
    configure_logging(settings.log_format, settings.log_level)
    return settings


def _fail(exc: NaviError) -> typer.Exit:
    typer.echo(f"error: {exc.message}", err=True)
    return typer.Exit(1)


def _progress(line: str) -> None:
    typer.echo(line, err=True)


@app.command("build")
def build(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="Images to build (directories of sandbox_images/). Default: all but "
            "those built on demand only (browser: name it to build it)."
        ),
    ] = None,
    base: Annotated[
        str | None,
        typer.Option(
            help="Build on this registry image (e.g. debian:bookworm-slim) instead of an "
            "offline mmdebstrap rootfs; the Dockerfile then apt-installs packages.txt."
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Rebuild even when the content hash matches.")
    ] = False,
) -> None:
    """Build sandbox images offline, skipping those whose content hash is unchanged."""
    settings = _settings()
    try:
        results = build_images(
            names or None, settings=settings, base=base, force=force, progress=_progress
        )
    except NaviError as exc:
        raise _fail(exc) from None
    for result in results:
        verb = "built" if result.status == "built" else "up to date"
        typer.echo(
            f"{result.name}: {verb} {result.ref} {result.image_id[:19]} ({result.seconds:.1f} s)"
        )


@app.command("list")
def list_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show every sandbox image: present, up to date, size."""
    settings = _settings()
    try:
        client = connect()
        try:
            infos = list_images(client, settings)
        finally:
            client.close()
    except NaviError as exc:
        raise _fail(exc) from None
    if as_json:
        typer.echo(json.dumps([info.model_dump() for info in infos], indent=2))
        return
    typer.echo(f"{'NAME':<14} {'STATUS':<11} {'SIZE':>8}  {'REF':<28} ID")
    for info in infos:
        status = "missing" if not info.present else ("ok" if info.up_to_date else "stale")
        size = f"{info.size_bytes / 1e6:.0f} MB" if info.size_bytes else "-"
        typer.echo(
            f"{info.name:<14} {status:<11} {size:>8}  {info.ref:<28} {(info.image_id or '-')[:19]}"
        )
