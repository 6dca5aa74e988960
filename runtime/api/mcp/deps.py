"""What the MCP endpoint needs from the server that runs it: the parts, typed.

The API's `Services` satisfies `McpDeps`: a connection opens (or finds) its session as the
API does (`runtime.sessions.deps.OpenDeps`), lists and calls its tools, reads its files and
relays its events, and ends when its token does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from runtime.agent.deps import ToolCallDeps
from runtime.sessions.deps import OpenDeps

if TYPE_CHECKING:
    from runtime.sessions.principal import Principal


class McpDeps(OpenDeps, ToolCallDeps, Protocol):
    """A session opened and its policy subject (`OpenDeps`), its tools, calls and events
    (`ToolCallDeps`)."""

    async def token_ended(self, principal: Principal) -> None:
        """Returns when the principal's token is revoked or expires."""
        ...
