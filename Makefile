# The two commands (README): `make run` serves the API, `make test` runs the test suite.
# Both first run scripts/setup.sh, which installs and starts whatever is missing (Debian
# packages, dockerd, .venv, sandbox images) and does nothing when all is in place.
#
#   make run  [HOST=127.0.0.1] [PORT=8000]
#   make test [PYTEST_ARGS='-k images -x']
#   make setup | make images [IMAGES='python'] [IMAGES_BASE=debian:bookworm-slim]
#   make lint (ruff + mypy; .ci/run runs it after the tests)

HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=
IMAGES ?=
IMAGES_BASE ?=
NAVI_DATA_DIR ?= ./data
export NAVI_DATA_DIR IMAGES_BASE

VENV := .venv

.PHONY: run test setup images lint models

run: setup
	@if [ -z "$$NAVI_OLLAMA_HOST$$NAVI_OPENAI_BASE_URL" ] && ! $(VENV)/bin/navi models status | grep -q ': installed'; then \
	    echo "==> no model server configured and the embedded model is not installed: the first agent"; \
	    echo "    message will build it (about 5 min on 2 cores). Run \`make models\` now, or point"; \
	    echo "    NAVI_OLLAMA_HOST (or NAVI_OPENAI_BASE_URL) at a model server (README: Which model answers)."; \
	fi
	exec $(VENV)/bin/navi serve --host '$(HOST)' --port '$(PORT)'

# PYTEST_EXIT_FILE (used by .ci/run) receives pytest's own exit code: make only says "failed".
test:
	@NAVI_SETUP_TEST_TOOLS=1 bash scripts/setup.sh
	@rc=0; $(VENV)/bin/pytest -p no:cacheprovider $(PYTEST_ARGS) || rc=$$?; \
	if [ -n '$(PYTEST_EXIT_FILE)' ]; then echo $$rc > '$(PYTEST_EXIT_FILE)'; fi; \
	exit $$rc

setup:
	@bash scripts/setup.sh

# The embedded model, built ahead of time (about 5 minutes on two cores, once)
models: setup
	$(VENV)/bin/navi models install

images: setup
	$(VENV)/bin/navi images build $(if $(IMAGES_BASE),--base '$(IMAGES_BASE)') $(IMAGES)

lint:
	$(VENV)/bin/ruff check runtime tests bench clients
	$(VENV)/bin/mypy runtime clients/python/navi_client
