"""Moved to `runtime.events.replay`; re-exported here for code written against the old path."""

from runtime.events.replay import (
    EVENT_OVERHEAD,
    ReplayBudget,
    ReplayBuffer,
    ReplayLimits,
    event_cost,
)

__all__ = ["EVENT_OVERHEAD", "ReplayBudget", "ReplayBuffer", "ReplayLimits", "event_cost"]
