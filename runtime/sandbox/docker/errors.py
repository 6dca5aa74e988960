"""Docker SDK errors mapped to ours in one place: ``with map_docker_errors("start the sandbox")``.

"The sandbox broke" is always a ``SandboxError`` subclass with a message a person can act on:

    docker.errors.ImageNotFound              -> ImageMissing       (build the image)
    requests ConnectionError / Timeout,
    DockerException while connecting         -> EngineUnavailable  (start dockerd)
    docker.errors.APIError (any other)       -> SandboxError       (the engine refused)

A failing *program* never comes through here: a non-zero exit is a normal ``ExecResult``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import docker.errors
import requests.exceptions

from runtime.errors import EngineUnavailable, ImageMissing, SandboxError


def _explain(exc: docker.errors.APIError) -> str:
    explanation = exc.explanation
    if isinstance(explanation, bytes):
        explanation = explanation.decode("utf-8", "replace")
    return str(explanation or exc)[:500]


@contextmanager
def map_docker_errors(action: str, *, image: str | None = None) -> Iterator[None]:
    """Re-raise Docker SDK failures while doing ``action`` as our ``SandboxError`` tree."""
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        name = image or "?"
        short = name.rsplit("/", 1)[-1].split(":", 1)[0]  # navi/browser:latest -> browser
        raise ImageMissing(
            f"sandbox image {name!r} is not present on the Docker engine; "
            f"build it with `navi images build {short}`",
            image=name,
        ) from exc
    except docker.errors.APIError as exc:
        raise SandboxError(
            f"the Docker engine refused to {action}: {_explain(exc)}",
            status=exc.status_code,
        ) from exc
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
        raise EngineUnavailable(
            f"the Docker engine did not answer while trying to {action}; "
            "is dockerd running and is its socket reachable?"
        ) from exc
    except docker.errors.DockerException as exc:
        raise EngineUnavailable(f"cannot use the Docker engine to {action}: {exc}") from exc
