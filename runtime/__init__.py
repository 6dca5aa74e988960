"""Navi Runtime: an agent runtime whose every execution is sandboxed, decided and audited."""

__version__ = "0.1.0"
__all__ = ["__version__"]
