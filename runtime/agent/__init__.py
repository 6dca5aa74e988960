"""The agent loop: model backends, profiles, the conversation store, one turn at a time.

    agent = AgentService.from_settings(settings)          # app factory; ConfigError on bad files
    turn_id = await agent.start_turn(services, subject, content)   # Conflict if one runs
    await agent.cancel(session_id, services)              # kills its container; -> turn id|None
    rows = await agent.history(services, session_id)      # list[StoredMessage]
    await agent.close()

Events of a turn: see `runtime.agent.loop`.
"""

from runtime.agent.history import MessageStore, StoredMessage
from runtime.agent.profiles import AgentProfile, ProfileSet, ThinkingMechanics, load_persona
from runtime.agent.service import AgentService

__all__ = [
    "AgentProfile",
    "AgentService",
    "MessageStore",
    "ProfileSet",
    "StoredMessage",
    "ThinkingMechanics",
    "load_persona",
]
