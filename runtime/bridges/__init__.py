"""Bridges from agent stacks people already use to Navi's one decision path: the MCP server
(`/mcp`, `navi mcp stdio`) and the inspect_ai sandbox provider (type `navi`)."""
