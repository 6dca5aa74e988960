"""`navi doctor`'s checks of the host beside the engine: whose accounts the sandbox uids are
kept clear of, and whom the embedded model runs as.

Under docker-compose the supervisor's /etc/passwd is its image's: unless the host's is
mounted and named (`NAVI_HOST_PASSWD`), "never a host uid" would be checked against the wrong
file. A supervisor whose engine socket is bind-mounted in from elsewhere (so the engine's
host is not the system whose passwd we read) fails this check without it. The embedded
model's check only warns: where it cannot run as a uid of its own it is refused (or, under a
supervisor that is not root, runs as the supervisor's user), never run with more.
"""

from __future__ import annotations

from pathlib import Path

from runtime.agent.llm.embedded import EmbeddedServer
from runtime.agent.llm.embedded_confine import default_directory, reachable
from runtime.config import Settings
from runtime.errors import NaviError
from runtime.hostusers import checked_against
from runtime.sandbox.docker.selfcheck import Check

MOUNTINFO = Path("/proc/self/mountinfo")


def engine_socket_mounted(mountinfo: Path = MOUNTINFO) -> bool:
    """The Docker socket is a bind mount: the engine (and the sandboxes' host) is elsewhere,
    as under docker-compose; an engine started here makes its socket, no mount."""
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return False
    return any(len(f := line.split()) > 4 and Path(f[4]).name == "docker.sock" for line in lines)


def host_checks(settings: Settings, in_container: bool | None = None) -> list[Check]:
    elsewhere = engine_socket_mounted() if in_container is None else in_container
    return [_uids(settings, elsewhere), _embedded(settings)]


def _uids(settings: Settings, in_container: bool) -> Check:
    name = "sandbox uids: never a host account's"
    try:
        where = checked_against(settings.host_passwd)
    except NaviError as exc:
        return Check(name, False, exc.message)
    if in_container and settings.host_passwd is None:
        return Check(name, False, f"checked against {where}, but the engine's socket is "
                     "mounted in (a container, as under docker-compose): mount the host's "
                     "/etc/passwd read-only and name it in NAVI_HOST_PASSWD "
                     "(docker-compose.yml does: /host/etc/passwd)")
    return Check(name, True, f"checked against {where}")


def _embedded(settings: Settings) -> Check:
    name = "embedded model: its own uid"
    if settings.embedded_model == "off":
        return Check(name, True, "off (NAVI_EMBEDDED_MODEL=off)")
    directory = (settings.embedded_dir or default_directory(
        settings.data_dir, settings.embedded_uid, settings.sandbox_uid_base)).resolve()
    server = EmbeddedServer(directory, uid=settings.embedded_uid,
                            uid_base=settings.sandbox_uid_base, passwd=settings.host_passwd)
    try:
        user = server.user()
        reachable(directory, user)
    except NaviError as exc:  # refused, never run weaker: a warning, not a failure
        return Check(name, True, f"WARNING: it would not start: {exc.message} (or "
                     "NAVI_EMBEDDED_MODEL=off)")
    if not user.confined:
        return Check(name, True, f"WARNING: {user.note}; it can read what the supervisor can")
    return Check(name, True, f"{user.note}; {directory}")
