"""`navi`: the command line. Thin: each sub-command lives in ``runtime.commands``."""

from __future__ import annotations

import typer

from runtime.commands import (
    audit,
    backup,
    bench,
    cluster,
    doctor,
    exec_cmd,
    images,
    mcp,
    models,
    policy,
    secrets,
    serve,
    tokens,
    tools_cli,
)

app = typer.Typer(
    name="navi",
    help="Navi Runtime: sandboxed, policy-governed, audited agent executions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("serve")(serve.serve)
app.command("exec")(exec_cmd.exec_command)
app.command("doctor")(doctor.doctor)
app.command("backup")(backup.backup)
app.command("restore")(backup.restore)
app.add_typer(images.app, name="images")
app.add_typer(audit.app, name="audit")
app.add_typer(policy.app, name="policy")
app.add_typer(tokens.app, name="tokens")
app.add_typer(bench.app, name="bench")
app.add_typer(models.app, name="models")
app.add_typer(mcp.app, name="mcp")
app.add_typer(secrets.app, name="secrets")
app.add_typer(cluster.app, name="cluster")
app.add_typer(tools_cli.app, name="tools")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
