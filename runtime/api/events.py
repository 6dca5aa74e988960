"""Moved to `runtime.events` (below both the API and the agent); re-exported here for code
written against the old path."""

from runtime.events import Event, EventHub, SessionEventBus

__all__ = ["Event", "EventHub", "SessionEventBus"]
