# The supervisor (navi serve) as an image, for docker-compose.yml. Built offline by
# scripts/supervisor_image.sh: BASE is navi/python:latest (an mmdebstrap rootfs made by
# `navi images build`, python3 + venv inside), the dependencies come as wheels from
# .build/supervisor-wheels, and `docker build --network none` never reaches a registry.
# On a host with a registry: BASE=debian:bookworm-slim (python3 is apt-installed then).
#
# Trust: this container is TRUSTED. It holds the Docker socket (root on the host) to start
# sandbox containers; those never get the socket, the network or host namespaces.
ARG BASE=navi/python:latest
FROM ${BASE}

USER root
RUN set -eu; \
    if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            python3 python3-venv; \
        rm -rf /var/lib/apt/lists/*; \
    fi

COPY .build/supervisor-wheels /tmp/wheels
RUN python3 -m venv /opt/navi \
    && /opt/navi/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels \
        -r /tmp/wheels/requirements.txt \
    && rm -rf /tmp/wheels

# The runtime runs from its source tree (policies, manuals, tools and the sandbox image
# definitions are found beside the package; navi_client, its client and answer models, too).
WORKDIR /app
COPY pyproject.toml README.md ./
COPY policies ./policies
COPY manuals ./manuals
COPY tools ./tools
COPY sandbox_images ./sandbox_images
COPY runtime ./runtime
COPY clients/python/navi_client ./navi_client
COPY bench ./bench

ENV PATH=/opt/navi/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONPATH=/app PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HOME=/root \
    NAVI_HOST=0.0.0.0 NAVI_PORT=8000 NAVI_DATA_DIR=/var/lib/navi NAVI_LOG_FORMAT=json
LABEL navi.supervisor="true"
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/v1/healthz' % os.environ.get('NAVI_PORT', '8000'), timeout=3)"]
ENTRYPOINT ["python3", "-m", "runtime.cli"]
CMD ["serve"]
