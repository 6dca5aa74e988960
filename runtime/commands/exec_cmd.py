"""`navi exec`: placeholder until the executor lands."""

import typer


def exec_command() -> None:
    """Run one tool call locally (not built yet)."""
    raise typer.Exit(2)
