"""`navi doctor`: is this host able to run sandboxes safely? Prints a check list, fails closed.

Checks the seccomp profile, the engine, the workspaces root mount flags, the sandbox images,
and runs a probe container that reports what the kernel really enforces (capabilities,
no-new-privileges, seccomp, uid, network, read-only root, cgroup limits); and which passwd the
sandbox uids are kept out of and whom the embedded model runs as (`doctor_host`); with
`NAVI_CLUSTER`, the cluster's nodes (`doctor_cluster`). Exit status 0 only when every check
passed.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer

from runtime.commands.doctor_cluster import cluster_checks
from runtime.commands.doctor_host import host_checks
from runtime.config import Settings
from runtime.logging import configure_logging
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.docker.selfcheck import Check, run_checks


async def _run(settings: Settings, images: list[str]) -> list[Check]:
    backend = DockerBackend.from_settings(settings)
    try:
        return await run_checks(backend, images)
    finally:
        await backend.close()


def doctor(
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Data directory (default NAVI_DATA_DIR).")
    ] = None,
    image: Annotated[
        list[str] | None,
        typer.Option("--image", help="Image to require (repeatable; default <prefix>/python)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
) -> None:
    """Check the engine, images, seccomp and confinement; exit 1 if anything fails."""
    settings = Settings(data_dir=data_dir) if data_dir else Settings()
    configure_logging(settings.log_format, "warning")
    images = image or [f"{settings.image_prefix}/python:latest"]
    checks = [*host_checks(settings), *asyncio.run(_run(settings, images)),
              *cluster_checks(settings)]
    if as_json:
        typer.echo(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        for check in checks:
            mark = "ok  " if check.ok else "FAIL"
            typer.echo(f"[{mark}] {check.name}: {check.detail}")
    failed = [c for c in checks if not c.ok]
    if failed or not checks:
        typer.echo(f"doctor: {len(failed)} check(s) failed", err=True)
        raise typer.Exit(1)
    typer.echo(f"doctor: all {len(checks)} checks passed", err=True)
