"""The Docker engine: ``DockerBackend`` runs each call in a fresh hardened container
(runc, or gVisor's runsc where the policy asks for it).

``spec.py`` is the typed, secure-by-default container description (``ContainerSpec``) in
front of the SDK; ``engine.py`` the engine client every step goes through; ``drive.py``
streams one started call to its end; ``warm_*.py`` the pool of pre-started containers and
its runner; ``reaper.py`` the safety net for containers that outlived their lease or their
supervisor; ``images*.py`` the offline image build; ``selfcheck.py`` ``navi doctor``'s probe.
"""

from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.errors import map_docker_errors
from runtime.sandbox.docker.reaper import Reaper
from runtime.sandbox.docker.spec import ContainerSpec, build_spec

__all__ = [
    "ContainerSpec",
    "DockerBackend",
    "DockerBackendConfig",
    "Reaper",
    "build_spec",
    "map_docker_errors",
]
