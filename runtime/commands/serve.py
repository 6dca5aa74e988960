"""`navi serve`: run the control API under uvicorn; SIGTERM kills running executions first."""

from __future__ import annotations

import asyncio
import faulthandler
from pathlib import Path
from typing import Annotated, Any

import typer
import uvicorn
from pydantic import ValidationError

from runtime.config import Settings
from runtime.errors import ConfigError, NaviError
from runtime.logging import (
    configure_logging,
    get_logger,
    route_stdlib_logging,
    scrub_from_logs,
)
from runtime.policy.engine import PolicyEngine
from runtime.store.store import BOOTSTRAP_MIN_CHARS
from runtime.store.tokens import TOKEN_MAX_CHARS

log = get_logger(__name__)


class _Server(uvicorn.Server):
    """On SIGINT/SIGTERM, kill the running sandboxes (audited) before uvicorn drains requests."""

    def __init__(self, config: uvicorn.Config, app: Any) -> None:
        super().__init__(config)
        self._app = app

    def handle_exit(self, sig: int, frame: Any) -> None:
        services = getattr(self._app.state, "services", None)
        if services is not None and not self.should_exit:
            log.info("shutdown_requested", signal=sig)
            asyncio.get_event_loop().create_task(services.kill_running("supervisor shutdown"))
            services.hub.close()  # end SSE/WS streams so uvicorn need not wait for them
        super().handle_exit(sig, frame)


def serve(
    # (not "[default: …]": rich help renders square brackets as markup and drops them)
    host: Annotated[str | None, typer.Option(
        help="address to bind (default: NAVI_HOST or 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default: NAVI_PORT or 8000)")] = None,
    data_dir: Annotated[Path | None, typer.Option(
        help="data directory (default: NAVI_DATA_DIR or ./data)")] = None,
    policy: Annotated[Path | None, typer.Option(
        help="server policy file (default: NAVI_POLICY or policies/default.yaml)")] = None,
) -> None:
    """Serve the control API and the web client."""
    from runtime.server import create_app

    given = {"host": host, "port": port, "data_dir": data_dir, "policy": policy}
    overrides: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    try:
        settings = Settings(**overrides)
        PolicyEngine.from_file(settings.policy)  # fail before binding, with the file's location
        token = settings.admin_token.get_secret_value() if settings.admin_token else None
        if token is not None and not BOOTSTRAP_MIN_CHARS <= len(token) <= TOKEN_MAX_CHARS:
            raise ConfigError(
                f"NAVI_ADMIN_TOKEN must be {BOOTSTRAP_MIN_CHARS}-{TOKEN_MAX_CHARS} characters")
    except (ValidationError, NaviError) as exc:
        typer.echo(f"error: {getattr(exc, 'message', exc)}", err=True)
        raise typer.Exit(2) from None
    configure_logging(settings.log_format, settings.log_level)
    route_stdlib_logging(settings.log_format, settings.log_level)
    scrub_from_logs(*(s.get_secret_value() for s in (settings.admin_token,
                                                    settings.openai_api_key) if s))
    faulthandler.enable()  # a fatal signal (SIGBUS, SIGABRT...) leaves every stack in the log
    app = create_app(settings)
    config = uvicorn.Config(  # uvicorn's own lines through ours; requests: AccessLog's
        app, host=settings.host, port=settings.port, log_level=settings.log_level,
        log_config=None, access_log=False,
        timeout_graceful_shutdown=10, proxy_headers=False, server_header=False,
    )
    log.info("serving", url=f"http://{settings.host}:{settings.port}/",
             data_dir=str(settings.data_dir), policy=str(settings.policy))
    _Server(config, app).run()
