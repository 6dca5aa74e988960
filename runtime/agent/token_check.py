"""A turn acts with the token that started it, for as long as it runs: a token revoked or
expired meanwhile stops the turn (and its sub-agents, which act with the same token) before
its next model step and before its next tool call, not at its end.

The store is asked each time (one indexed read): a revocation made elsewhere (the CLI on the
same data dir) counts as much as one made through the API. Subjects that are not a token's
(`local`, a test's or a command's) are not checked.
"""

from __future__ import annotations

from runtime.errors import TokenRevoked
from runtime.policy.decision import Subject
from runtime.store import Store
from runtime.store.ids import is_token_id
from runtime.store.tokens import now


async def check_token(store: Store, subject: Subject) -> None:
    """Raise `TokenRevoked` when `subject`'s token no longer authenticates."""
    if not is_token_id(subject.user):
        return
    record = await store.get_token(subject.user)
    if record is None or record.revoked_at is not None:
        raise TokenRevoked("the token this turn acts with was revoked: the turn stops")
    if record.expires_at is not None and record.expires_at <= now():
        raise TokenRevoked("the token this turn acts with has expired: the turn stops")
