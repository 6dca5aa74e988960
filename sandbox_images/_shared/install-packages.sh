#!/bin/sh
# Shared by every sandbox image (copied into each build context as _shared/):
# install the Debian packages of packages.txt that the base lacks, then drop apt state and docs.
# On the offline base (an mmdebstrap rootfs that already holds them) no apt runs at all, so the
# build works with --network none; on debian:bookworm-slim the missing ones are apt-installed.
set -eu
list="$1"
missing=""
for p in $(sed -e 's/#.*//' "$list"); do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -qx 'install ok installed' \
        || missing="$missing $p"
done
if [ -n "$missing" ]; then
    apt-get update
    # shellcheck disable=SC2086 # one word per package
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
fi
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old \
    /var/log/apt /var/log/dpkg.log /usr/share/man /usr/share/info /usr/share/locale
find /usr/share/doc -xdev -type f ! -name copyright -delete 2>/dev/null || true
