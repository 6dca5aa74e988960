"""The driver of `ssh_exec`: runs INSIDE the sandbox (ssh image), never in the supervisor.

stdin is `<n>\\n` + the n bytes of the private key (put there by the Recorder, from the
tenant's secret the policy names) + the job as JSON: host, port, user, command, timeout_s and
the pinned host keys. The key is written to a 0600 file in the call's /tmp (a tmpfs that
dies with the container), never to argv or the environment. ssh then runs with only that key,
only the pinned host keys (anything else is refused), no config file, no agent, and
`ProxyCommand` set to this file's `--connect` mode: a CONNECT tunnel through the call's
allowlisting egress proxy (the unix socket the supervisor mounts), so the proxy decides again.
A tenant's uid has no passwd entry (ssh refuses to run without one): nss_wrapper lends one.
"""

import json
import os
import socket
import subprocess
import sys
import threading

WORK = "/tmp/navi-ssh"
NSS_WRAPPER = "/usr/local/lib/libnss_wrapper.so"


def connect(host: str, port: str) -> int:
    """ProxyCommand: CONNECT host:port over the egress socket, then copy bytes both ways."""
    path = os.environ.get("NAVI_EGRESS_SOCKET", "")
    if not path:
        sys.stderr.write("navi: this call has no egress\n")
        return 1
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            break
        head += chunk
    status = head.split(b"\r\n", 1)[0].decode("latin-1")
    if status.split(" ")[1:2] != ["200"]:
        sys.stderr.write(f"navi: the egress proxy refused {host}:{port}: {status}\n")
        return 1

    def up() -> None:
        while data := os.read(0, 65536):
            sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)

    threading.Thread(target=up, daemon=True).start()
    while data := sock.recv(65536):
        os.write(1, data)
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--connect"]:
        return connect(sys.argv[2], sys.argv[3])
    raw = sys.stdin.buffer
    size = int(raw.readline().strip() or b"0")
    key = raw.read(size)
    job = json.loads(raw.read())
    if not key:
        sys.stderr.write("navi: no ssh key: the tenant has no secret named by the policy\n")
        return 254
    os.makedirs(WORK, mode=0o700, exist_ok=True)
    files = {"id": key + (b"" if key.endswith(b"\n") else b"\n"),
             "known_hosts": ("\n".join(job["known_hosts"]) + "\n").encode(),
             "passwd": f"navi:x:{os.getuid()}:{os.getgid()}:navi:/tmp:/bin/sh\n".encode(),
             "group": f"navi:x:{os.getgid()}:\n".encode(),
             "connect.py": job["driver"].encode()}  # this file (run with -c, it has none)
    for name, data in files.items():
        fd = os.open(os.path.join(WORK, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
    env = {**os.environ, "LD_PRELOAD": NSS_WRAPPER,
           "NSS_WRAPPER_PASSWD": f"{WORK}/passwd", "NSS_WRAPPER_GROUP": f"{WORK}/group"}
    proxy = f"python3 -I {WORK}/connect.py --connect %h %p"
    argv = ["ssh", "-F", "/dev/null", "-T", "-i", f"{WORK}/id", "-p", str(job["port"]),
            "-l", job["user"],
            "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={WORK}/known_hosts",
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "UpdateHostKeys=no",
            "-o", "CheckHostIP=no", "-o", f"ProxyCommand={proxy}",
            "-o", f"ConnectTimeout={max(1, int(job['timeout_s']))}", "-o", "LogLevel=ERROR",
            "--", job["host"], job["command"]]
    try:
        return subprocess.run(argv, env=env, stdin=subprocess.DEVNULL,
                              timeout=job["timeout_s"]).returncode
    except subprocess.TimeoutExpired:
        sys.stderr.write(f"navi: timed out after {job['timeout_s']} s\n")
        return 124
    finally:
        os.unlink(f"{WORK}/id")


if __name__ == "__main__":
    sys.exit(main())
