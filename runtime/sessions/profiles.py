"""The app's `ProfileDirectory`: which profiles a session may move to, and the move.

Allowed: the policy's profiles assigned to the subject's tenant whose `roles` admit its
role (what `POST /v1/sessions` would accept). A move is audited before it is made
(`session.profile`, object the session, detail `old -> new`), stored on the session and
published as `profile_changed`.
"""

from __future__ import annotations

from runtime.errors import InvalidInput
from runtime.events import EventHub, ProfileChanged
from runtime.executor import Executor
from runtime.policy.decision import Subject
from runtime.policy.engine import PolicyEngine
from runtime.store import Store
from runtime.tools.builtin.profiles import ProfileInfo


class SessionProfiles:
    def __init__(self, policy: PolicyEngine, store: Store, executor: Executor,
                 hub: EventHub) -> None:
        self.policy = policy
        self.store = store
        self.executor = executor
        self.hub = hub

    def names(self, subject: Subject) -> list[str]:
        found = self.policy.tenant_rule(subject.policy_tenant)
        if found is None:
            return []
        profiles = self.policy.policy.profiles
        return [name for name in found[1].profiles
                if name in profiles and subject.role in profiles[name].roles]

    async def allowed(self, subject: Subject) -> list[ProfileInfo]:
        profiles = self.policy.policy.profiles
        return [ProfileInfo(name=n, description=profiles[n].description,
                            active=n == subject.profile) for n in self.names(subject)]

    async def switch(self, subject: Subject, profile: str) -> str:
        if subject.agent_depth > 0:
            raise InvalidInput("a sub-agent cannot switch the session's profile")
        names = self.names(subject)
        if profile not in names:
            raise InvalidInput(f"profile {profile!r} is not one this session may use "
                               f"(allowed: {', '.join(names) or 'none'})")
        record = await self.store.get_session(subject.tenant, subject.session)
        if record is None:
            raise InvalidInput("profiles can only be switched inside a session")
        previous = record.profile
        if previous == profile:
            return previous
        found = self.policy.tenant_rule(subject.policy_tenant)
        rule = f"tenants.{found[0]}.profiles" if found else "default.deny"
        await self.executor.record_action(subject, "session.profile", subject.session,
                                          rule=rule, detail=f"{previous} -> {profile}")
        await self.store.set_session_profile(subject.tenant, subject.session, profile)
        self.hub.bus(subject.session).publish(ProfileChanged(profile=profile,
                                                             previous=previous))
        return previous
