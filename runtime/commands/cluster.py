"""`navi cluster local up|status|down`: a real multi-node cluster on this machine.

Progress goes to stderr; `up` ends with the line `NAVI_CLUSTER=<address>` on stdout, `status`
prints JSON. The cluster's files (state, token, engines' data) live in --dir, by default
`<NAVI_DATA_DIR>/cluster`, so its token is `<dir>/keys/cluster-token`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from runtime.config import Settings
from runtime.errors import NaviError

app = typer.Typer(help="Clusters of execution nodes.", no_args_is_help=True)
local_app = typer.Typer(help="A local multi-node cluster for development, tests and demos.",
                        no_args_is_help=True)
app.add_typer(local_app, name="local")

DirOption = Annotated[
    Path | None,
    typer.Option("--dir", help="The cluster's files (default: <NAVI_DATA_DIR>/cluster)."),
]


def _sandbox_images() -> list[str]:
    """The sandbox images (navi/python:latest, …): what a node runs, nothing else."""
    from runtime.sandbox.docker.image_spec import IMAGES_DIR, discover
    from runtime.sandbox.docker.images import image_ref

    return [image_ref(name) for name in discover(IMAGES_DIR)]


def _dir(directory: Path | None) -> Path:
    return directory if directory is not None else Settings().data_dir / "cluster"


def _fail(exc: NaviError) -> typer.Exit:
    typer.echo(f"error: {exc.message}", err=True)
    return typer.Exit(1)


@local_app.command("up")
def up(
    nodes: Annotated[int, typer.Option("--nodes", help="How many execution nodes.")] = 2,
    directory: DirOption = None,
    image: Annotated[
        list[str] | None,
        typer.Option("--image", help="A host image to copy to each node (default: the sandbox "
                     "images)."),
    ] = None,
) -> None:
    """Start a Ray head and NODES nodes, each in its own network namespace and Docker engine."""
    from runtime.cluster import local

    def say(line: str) -> None:
        typer.echo(line, err=True)

    try:
        state = local.up(_dir(directory), nodes, image or _sandbox_images(), say)
    except local.AlreadyUp as already:
        say(f"a local cluster is already up in {already.state.dir}")
        state = already.state
    except NaviError as exc:
        raise _fail(exc) from None
    typer.echo(f"RAY_AUTH_TOKEN_PATH={state.token_file}")
    typer.echo(f"NAVI_CLUSTER={state.address}")


@local_app.command("status")
def status(directory: DirOption = None) -> None:
    """Print the cluster as JSON: its address and every process of each node by pid."""
    from runtime.cluster import local

    found = local.status(_dir(directory))
    if found is None:
        typer.echo("error: no local cluster is up", err=True)
        raise typer.Exit(1)
    typer.echo(json.dumps(found, indent=2))


@local_app.command("down")
def down(directory: DirOption = None) -> None:
    """End every process of the cluster by pid and remove what `up` made."""
    from runtime.cluster import local

    try:
        ended = local.down(_dir(directory))
    except NaviError as exc:
        raise _fail(exc) from None
    typer.echo("local cluster down" if ended else "no local cluster is up", err=True)
