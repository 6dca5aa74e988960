"""Sessions as a service of their own: who acts (`Principal`), opening and ending a session
(`open_session`, `end_session`: quota, audit, the session's disk on its node), the profile a
session runs under (`SessionProfiles`) and its title (`titles`).

Why apart from `runtime.api`: the MCP endpoint, the agent's tools and the HTTP routes all
open, end and switch sessions; none of that is HTTP, and a session's disk now lives on its
node (`runtime.nodes`), which the API layer should not have to know how to reach.
"""
