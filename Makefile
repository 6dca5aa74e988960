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

.PHONY: run test setup images lint

run: setup
	exec $(VENV)/bin/navi serve --host '$(HOST)' --port '$(PORT)'

# PYTEST_EXIT_FILE (used by .ci/run) receives pytest's own exit code: make only says "failed".
test:
	@NAVI_SETUP_TEST_TOOLS=1 bash scripts/setup.sh
	@rc=0; $(VENV)/bin/pytest -p no:cacheprovider $(PYTEST_ARGS) || rc=$$?; \
	if [ -n '$(PYTEST_EXIT_FILE)' ]; then echo $$rc > '$(PYTEST_EXIT_FILE)'; fi; \
	exit $$rc

setup:
	@bash scripts/setup.sh

images: setup
	$(VENV)/bin/navi images build $(if $(IMAGES_BASE),--base '$(IMAGES_BASE)') $(IMAGES)

lint:
	$(VENV)/bin/ruff check runtime tests bench
	$(VENV)/bin/mypy runtime
