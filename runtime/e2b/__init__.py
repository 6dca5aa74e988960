"""E2B-compatible API: the E2B SDKs work against Navi with three environment variables.

`E2BServer` is mounted at `/e2b` (control side and sandbox side on one address, told apart
by the SDK's `E2b-Sandbox-Id` header); `Sandboxes.reap_forever` ends sandboxes at their
timeout. An E2B sandbox is a Navi session made through `/e2b`: its commands are Navi
processes, its files the session's workspace (`/home/user`) and /tmp, its code interpreter a
Navi kernel; all of it decided by the policy and audited like Navi's own API.
"""

from runtime.e2b.sandboxes import ENVD_VERSION, Sandboxes
from runtime.e2b.server import E2BServer

__all__ = ["ENVD_VERSION", "E2BServer", "Sandboxes"]
