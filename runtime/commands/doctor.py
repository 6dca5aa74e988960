"""`navi doctor`: placeholder until the sandbox backend lands."""

import typer


def doctor() -> None:
    """Check the engine, images and confinement (not built yet)."""
    raise typer.Exit(2)
