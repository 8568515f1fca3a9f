# One command sets up and runs the main job (`make run`); one runs the tests (`make test`).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
UV_VERSION := 0.9.5
# uv ships its own root certificates; behind a TLS-intercepting proxy it must use the system store.
export UV_NATIVE_TLS := 1
export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: setup run test unit lint render render-check golden clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml uv.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv sync --frozen --extra dev --quiet
	touch $@

## The main job: resolve the matrix and show the default image.
run: setup
	$(BIN)/imgbuild matrix

## Everything CI checks: lint, rendered files up to date, the test suite.
test: lint render-check unit

unit: setup
	$(BIN)/pytest

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
