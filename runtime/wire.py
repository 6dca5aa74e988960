"""The control API's answers as pydantic models. Their one definition is the client's
(`navi_client.wire`, `clients/python/`), which imports pydantic only: the server re-exports
it here, so a field is added in one place and both sides read it."""

from navi_client.wire import *  # noqa: F403
from navi_client.wire import __all__ as __all__
