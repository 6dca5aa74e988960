"""`navi serve`: placeholder until the API lands."""

import typer


def serve() -> None:
    """Serve the control API (not built yet)."""
    raise typer.Exit(2)
