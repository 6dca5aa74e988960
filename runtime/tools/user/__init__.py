"""User tools (agent-written, Navi's format): read with `ast`, stored per tenant, run sandboxed."""

from runtime.tools.user.catalog import UserToolCatalogs
from runtime.tools.user.descriptor import (
    ToolLoadError,
    UserToolDescriptor,
    parse_descriptor,
    validate_params,
)
from runtime.tools.user.store import LoadedUserTool, ToolCatalog, UserToolStore
from runtime.tools.user.tool import UserTool

__all__ = [
    "LoadedUserTool",
    "ToolCatalog",
    "ToolLoadError",
    "UserTool",
    "UserToolCatalogs",
    "UserToolDescriptor",
    "UserToolStore",
    "parse_descriptor",
    "validate_params",
]
