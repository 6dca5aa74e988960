#!/bin/sh
# Shared by every sandbox image, as its last root step: no setuid/setgid file may remain (a
# test checks), the working directory exists for any uid, the egress entry is installed
# (navi-egress: relays 127.0.0.1:3128 to the egress proxy socket when a call has egress), the
# stdio relay for gVisor calls is installed (navi-stdio: gVisor's host pipes cut long writes),
# so is the MCP client of policy-declared MCP servers (navi-mcp-call: one request per call),
# and the build's scratch is gone.
set -eu
find / -xdev -perm /6000 -exec chmod ug-s {} +
mkdir -p /workspace
chmod 0777 /workspace
install -m 0755 "$(dirname "$0")/navi-egress" /usr/local/bin/navi-egress
install -m 0755 "$(dirname "$0")/navi-stdio" /usr/local/bin/navi-stdio
install -m 0755 "$(dirname "$0")/navi-mcp-call" /usr/local/bin/navi-mcp-call
rm -rf /tmp/navi-build /root/.cache /root/.config
