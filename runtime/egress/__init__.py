"""Egress for sandboxes: an allowlisting HTTP proxy per execution, reached over a unix socket.

Containers never get a network (``--network none``, only ``lo``). When the policy grants
``network: egress`` the backend starts an ``EgressProxy`` for the call, bind-mounts its socket
read-only at ``/run/navi/egress.sock`` and runs the program under ``navi-egress`` (in every
image, from ``sandbox_images/_shared/``), which relays ``127.0.0.1:3128`` inside the container
to that socket; ``HTTP(S)_PROXY`` point there. What was allowed and refused comes back as
``ExecResult.egress`` (``EgressReport``) and in the audit outcome's ``detail``.
"""

from runtime.egress.proxy import EgressConfig, EgressProxy, egress_proxy, system_resolver
from runtime.egress.report import EgressDestination, EgressReport
from runtime.egress.rules import EgressRules, address_problem, normalize_host

CONTAINER_SOCKET = "/run/navi/egress.sock"
CONTAINER_PROXY = "http://127.0.0.1:3128"
ENTRY = "/usr/local/bin/navi-egress"


def container_env() -> dict[str, str]:
    """What a container with egress gets in its environment (overriding the caller's)."""
    return {
        "NAVI_EGRESS_SOCKET": CONTAINER_SOCKET,
        "HTTP_PROXY": CONTAINER_PROXY, "HTTPS_PROXY": CONTAINER_PROXY,
        "http_proxy": CONTAINER_PROXY, "https_proxy": CONTAINER_PROXY,
        "NO_PROXY": "", "no_proxy": "",
    }


__all__ = [
    "CONTAINER_PROXY",
    "CONTAINER_SOCKET",
    "ENTRY",
    "EgressConfig",
    "EgressDestination",
    "EgressProxy",
    "EgressReport",
    "EgressRules",
    "address_problem",
    "container_env",
    "egress_proxy",
    "normalize_host",
    "system_resolver",
]
