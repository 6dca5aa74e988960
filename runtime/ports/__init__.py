"""Ports and previews: a session's declared ports, reached through a relay its containers
connect out to (no network is ever added), proxied with the owner's token or a preview link."""

from runtime.ports.broker import SessionBroker
from runtime.ports.hub import PortsHub, check_port

__all__ = ["PortsHub", "SessionBroker", "check_port"]
