# One command sets up and runs the main job (`make run`); one runs the tests (`make test`).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
UV_VERSION := 0.9.5
# uv ships its own root certificates; behind a TLS-intercepting proxy it must use the system store.
export UV_NATIVE_TLS := 1
export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: setup run engine test unit quick lint render render-check golden clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml uv.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv sync --frozen --extra dev --quiet
	touch $@

# The host's CA bundle, trusted while building only (TLS-intercepting proxies); it never enters an image.
CA_BUNDLE ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)
BUILD_FLAGS ?=

## The main job: an engine (installed and started when missing, as root on Debian/Ubuntu), the OS base
## (bootstrapped when no registry answers), and the default image, built and tagged.
run: setup engine
	$(BIN)/imgbuild matrix
	$(BIN)/imgbuild build --bootstrap-base $(if $(CA_BUNDLE),--ca-bundle $(CA_BUNDLE)) $(BUILD_FLAGS)
	docker run --rm "$$($(BIN)/imgbuild matrix --json | $(BIN)/python -c 'import json,sys; print(json.load(sys.stdin)[0]["primary_ref"])')" gpu-check

engine:
	scripts/host-setup.sh

## Everything CI checks: lint, rendered files up to date, then the whole suite against a real engine
## (one torch image is built for real: ~10 GB of disk, minutes).
test: lint render-check engine unit

unit: setup
	$(BIN)/pytest

## The suite without the engine-backed tests: seconds, no Docker needed.
quick: setup
	$(BIN)/pytest -m "not engine"

lint: setup
	$(BIN)/ruff check builder smoke_tests tests
	$(BIN)/mypy
	$(BIN)/python -m builder.lint_dockerfiles

render: setup
	$(BIN)/imgbuild render --all

render-check: setup
	$(BIN)/imgbuild render --all --check

## Regenerate the golden Dockerfiles in tests/golden/ on purpose, after a reviewed template change.
golden: setup
	$(BIN)/python -m tests.golden_update

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
