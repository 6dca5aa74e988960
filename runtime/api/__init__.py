"""The control API (REST + SSE + WebSocket). `create_app(settings)` builds one instance."""

from runtime.api.app import create_app

__all__ = ["create_app"]
