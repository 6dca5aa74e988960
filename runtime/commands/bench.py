"""`navi bench`: benchmarks that write JSON to ``bench/results/`` (code lives in ``bench/``)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from bench.audit_bench import cli as audit_bench_cli
from runtime.config import Settings
from runtime.errors import NaviError
from runtime.logging import configure_logging

app = typer.Typer(help="Benchmarks; results go to bench/results/*.json.", no_args_is_help=True)
app.command("audit")(audit_bench_cli)  # code and docs: bench/audit_bench.py


@app.command("exec")
def exec_bench(
    runs: Annotated[int, typer.Option("--runs", min=1, help="Calls per measurement.")] = 30,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="Calls in flight for throughput.")
    ] = 4,
    image: Annotated[
        str | None, typer.Option("--image", help="Image (default <prefix>/python:latest).")
    ] = None,
) -> None:
    """Per-call latency (p50/p95) and throughput: our backend next to `docker run --rm`."""
    from bench.exec_bench import run_bench, write_results

    settings = Settings()
    configure_logging(settings.log_format, "warning")
    image = image or f"{settings.image_prefix}/python:latest"
    try:
        results = asyncio.run(run_bench(image, runs, concurrency))
    except NaviError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from exc
    path = write_results(results)
    for name in ("backend", "docker_run_rm"):
        lat, tput = results[name]["latency"], results[name]["throughput_per_s"]
        typer.echo(
            f"{name:14} p50 {lat['p50_ms']:7.1f} ms  p95 {lat['p95_ms']:7.1f} ms  "
            f"throughput {tput:6.2f}/s (concurrency {concurrency})"
        )
    typer.echo(f"results: {path}")
