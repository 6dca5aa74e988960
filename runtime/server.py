"""The whole server `navi serve` runs: the control API with the E2B-compatible bridge
mounted beside it at ``/e2b``.

The bridge (`runtime.e2b`) is another door into the same services: it authenticates with the
API's dependencies and answers with its errors, so it stands above `runtime.api`, and the
API does not import it. This module, above both, puts them together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from starlette.types import ASGIApp

from runtime.api.app import create_app as create_api
from runtime.config import Settings
from runtime.e2b import E2BServer, Sandboxes

if TYPE_CHECKING:
    from runtime.api.services import Services
    from runtime.sandbox.backend import SandboxBackend


class E2BFront:
    """The E2B bridge as a front of the API: its routes, and its sandboxes' timeouts."""

    path = "/e2b"

    def app(self, services: Callable[[], Services]) -> ASGIApp:
        return E2BServer(services)

    def start(self, services: Services) -> asyncio.Task[Any] | None:
        return asyncio.create_task(Sandboxes(services).reap_forever())


def create_app(settings: Settings | None = None, *, backend: SandboxBackend | None = None
               ) -> FastAPI:
    """The control API and the E2B bridge, on one app."""
    return create_api(settings, backend=backend, fronts=[E2BFront()])
