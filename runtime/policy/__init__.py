"""Policy: YAML files validated into ``PolicyFile``; ``PolicyEngine.decide`` answers every call."""

from runtime.policy.decision import Action, Decision, Role, Subject, Verdict
from runtime.policy.engine import PolicyEngine
from runtime.policy.loader import PolicyFileError, load_policy, parse_policy
from runtime.policy.model import GROUPS, PolicyFile, Quotas, TenantOverlay

__all__ = [
    "GROUPS",
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
]
