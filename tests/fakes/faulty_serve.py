"""`navi serve` with injected faults, for tests that need a real server's unexpected errors
(500s and the tracebacks logged with them) in every route family.

Run as `python -m tests.fakes.faulty_serve serve ...` (the arguments of `navi serve`):
- the sandbox backend is a `FakeBackend` whose every call raises `RuntimeError` (after the
  executor has built the request: granted secrets included), so exec, tools and MCP calls
  fail deep in the stack;
- while `<data_dir>/fault-routes` exists, every route of runtime/api/routes raises
  `RuntimeError` at its first look at the server's services (after authentication, inside
  the route: its arguments, body included, are on the stack); without the file they work.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fastapi import Request

from runtime.api import deps, routes
from runtime.api.routes import (
    admin,
    approvals,
    audit,
    events,
    exec,
    files,
    health,
    messages,
    secrets,
    sessions,
    tools,
)
from runtime.config import Settings
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.fake import FakeBackend, FakeResponse

FLAG = "fault-routes"


def _broken_backend(*_: Any, **__: Any) -> FakeBackend:
    return FakeBackend(default=FakeResponse(raises=RuntimeError("injected: the sandbox broke")))


def _services_of(flag: Path) -> Any:
    def services_of(request: Request) -> Any:
        services = deps.get_services(request)
        if flag.exists():
            raise RuntimeError("injected: the route's services broke")
        return services

    return services_of


def main() -> None:
    services_of = _services_of(Settings().data_dir / FLAG)  # NAVI_DATA_DIR, as the tests set
    DockerBackend.from_settings = _broken_backend  # type: ignore[method-assign,assignment]
    for module in (admin, approvals, audit, events, exec, files, health, messages, secrets,
                   sessions, tools):
        assert module.__name__.startswith(routes.__name__)
        module.get_services = services_of  # type: ignore[attr-defined]
    from runtime.cli import app

    sys.argv = ["navi", *sys.argv[1:]]
    app()


if __name__ == "__main__":
    main()
