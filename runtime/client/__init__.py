"""`runtime.client` is `navi_client` (the `navi-client` distribution, `clients/python/`):
the control API's Python client, installable without the server. This re-export keeps
`from runtime.client import NaviClient` working."""

from navi_client import *  # noqa: F403
from navi_client import __all__ as __all__
