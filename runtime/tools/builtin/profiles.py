"""`list_profiles` and `switch_profile`: the agent sees which profiles its tenant may use and
moves its session to another one (no code runs).

The profiles offered are the policy's: those assigned to the caller's tenant that admit its
role. A switch is audited (`session.profile`), stored on the session, announced to its
watchers (`profile_changed`) and used by the agent from its next step: that profile's
tools, limits and prompt. The directory that knows the tenant, store and audit is the
app's (`runtime.sessions.profiles`); without one these tools say so.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, Field

from runtime.errors import NotFound
from runtime.policy.decision import Subject
from runtime.tools.base import BuiltinTool, NoParams, P, ToolContext, ToolParams, ToolResult


class ProfileInfo(BaseModel):
    name: str
    description: str = ""
    active: bool = False


class ProfileDirectory(Protocol):
    async def allowed(self, subject: Subject) -> list[ProfileInfo]: ...

    async def switch(self, subject: Subject, profile: str) -> str:
        """Move the subject's session to `profile`; returns the previous one."""
        ...


class _ProfileTool(BuiltinTool[P]):
    group = "group:meta"

    def __init__(self, directory: ProfileDirectory | None = None) -> None:
        self.directory = directory

    def _dir(self) -> ProfileDirectory:
        if self.directory is None:
            raise NotFound("profiles cannot be listed or switched here")
        return self.directory


class ListProfilesTool(_ProfileTool[NoParams]):
    name = "list_profiles"
    description = ("List the profiles this session may use (the active one marked): each "
                   "sets which tools you have and their limits.")
    Params = NoParams

    async def execute(self, params: NoParams, ctx: ToolContext) -> ToolResult:
        found = await self._dir().allowed(ctx.subject)
        lines = [f"{'* ' if p.active else '- '}{p.name}" + (f": {p.description}"
                                                           if p.description else "")
                 for p in found]
        return ToolResult.ok("\n".join(lines) + "\n(* active)",
                             profiles=[p.model_dump() for p in found])


class SwitchProfileParams(ToolParams):
    profile: str = Field(min_length=1, max_length=64, description="a name list_profiles shows")


class SwitchProfileTool(_ProfileTool[SwitchProfileParams]):
    name = "switch_profile"
    description = ("Move this session to another profile (one list_profiles shows); from your "
                   "next step you have that profile's tools and limits.")
    Params = SwitchProfileParams

    async def execute(self, params: SwitchProfileParams, ctx: ToolContext) -> ToolResult:
        previous = await self._dir().switch(ctx.subject, params.profile)
        if previous == params.profile:
            return ToolResult.ok(f"the session already uses profile {params.profile!r}",
                                 profile=params.profile, previous=previous)
        return ToolResult.ok(f"switched from profile {previous!r} to {params.profile!r}; its "
                             "tools apply from your next step", profile=params.profile,
                             previous=previous)
