"""Policy: YAML files validated into ``PolicyFile``; ``PolicyEngine.decide`` answers every call."""

from runtime.policy.decision import (
    SERVER_TENANT,
    Action,
    Decision,
    Role,
    Subject,
    Verdict,
    server_subject,
)
from runtime.policy.engine import PolicyEngine
from runtime.policy.loader import PolicyFileError, load_policy, parse_policy
from runtime.policy.model import GROUPS, PolicyFile, Quotas, TenantOverlay

__all__ = [
    "GROUPS",
    "SERVER_TENANT",
    "Action",
    "Decision",
    "PolicyEngine",
    "PolicyFile",
    "PolicyFileError",
    "Quotas",
    "Role",
    "Subject",
    "TenantOverlay",
    "Verdict",
    "load_policy",
    "parse_policy",
    "server_subject",
]
