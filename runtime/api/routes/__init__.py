"""Thin route modules: parse, check the caller, call the runtime, shape the answer."""
