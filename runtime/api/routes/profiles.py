"""The profiles a new session of the caller may take (`active`: the one it gets by default),
what `POST /v1/sessions {profile}` accepts: the policy's profiles assigned to the caller's
tenant whose `roles` admit its role."""

from __future__ import annotations

from fastapi import APIRouter, Request

from runtime.api.deps import SessionUser, get_services, subject_for
from runtime.sessions.profiles import SessionProfiles
from runtime.tools.builtin.profiles import ProfileInfo

router = APIRouter(prefix="/v1/profiles", tags=["sessions"])


@router.get("", response_model=list[ProfileInfo])
async def list_profiles(request: Request, principal: SessionUser) -> list[ProfileInfo]:
    services = get_services(request)
    subject = await subject_for(services, principal, None)
    profiles = SessionProfiles(services.policy, services.store, services.executor, services.hub)
    return await profiles.allowed(subject)
