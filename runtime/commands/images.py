"""`navi images`: placeholder until its issue lands."""

import typer

app = typer.Typer(help="images commands", no_args_is_help=True)


@app.command("todo")
def _todo() -> None:
    """Not built yet."""
    raise typer.Exit(2)
