"""Liveness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from runtime import __version__
from runtime.api.deps import AuditReader, get_services
from runtime.api.schemas import HealthOut

router = APIRouter(prefix="/v1", tags=["health"])


@router.get("/healthz", response_model=HealthOut)
async def healthz() -> HealthOut:
    return HealthOut(status="ok", version=__version__)


@router.get("/metrics", response_class=Response)
async def metrics(request: Request, principal: AuditReader) -> Response:
    """The operator's admin sees every series; a tenant's auditor or tenant admin only the
    series of its own tenant's calls (`Metrics.render`)."""
    scope = None if principal.role == "admin" else principal.tenant_id
    data = get_services(request).metrics.render(scope)
    return Response(data, media_type="text/plain; version=0.0.4; charset=utf-8")
