# One command sets up and runs the main job (`make run`); one runs the tests (`make test`).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
UV_VERSION := 0.9.5
# uv ships its own root certificates; behind a TLS-intercepting proxy it must use the system store.
export UV_NATIVE_TLS := 1
export UV_PROJECT_ENVIRONMENT := $(VENV)
# Installed with their bytecode, and the package compiled too: where PYTHONDONTWRITEBYTECODE is set (these
# machines), every command would otherwise compile ~500 modules, half a second, before doing anything.
export UV_COMPILE_BYTECODE := 1

.PHONY: setup run engine test-engine build push test unit quick lint render render-check lock verify-repro verify-digests golden bench bench-engines bench-push test-repeat screenshot pipeline clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml uv.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv sync --frozen --extra dev --quiet
	$(BIN)/python -m compileall -q builder smoke_tests >/dev/null
	touch $@

# The host's CA bundle, trusted while building only (TLS-intercepting proxies); it never enters an image.
CA_BUNDLE ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)
BUILD_FLAGS ?=

## The main job: an engine (installed and started when missing, as root on Debian/Ubuntu), the OS base
## (bootstrapped when no registry answers), and the default image, built and tagged.
run: setup engine
	$(BIN)/imgbuild matrix
	$(BIN)/imgbuild build --bootstrap-base $(if $(CA_BUNDLE),--ca-bundle $(CA_BUNDLE)) $(BUILD_FLAGS)
	docker run --rm $$(docker info --format '{{json .Runtimes}}' | grep -q '"nvidia"' && echo --gpus all) \
	    "$$($(BIN)/imgbuild matrix --json | $(BIN)/python -c 'import json,sys; print(json.load(sys.stdin)[0]["primary_ref"])')" gpu-check

engine:
	scripts/host-setup.sh

## What the images workflow calls, per image: `make build BUILD_FLAGS="--variant X"`, then
## `make push PUSH_FLAGS="--variant X --registry HOST/NAMESPACE"`.
build: setup engine
	$(BIN)/imgbuild build --bootstrap-base $(if $(CA_BUNDLE),--ca-bundle $(CA_BUNDLE)) $(BUILD_FLAGS)

PUSH_FLAGS ?=
push: setup
	$(BIN)/imgbuild push $(PUSH_FLAGS)

## Everything CI checks: lint, rendered files up to date, then the whole suite against a real engine
## (one torch image is built for real: ~10 GB of disk, minutes).
test: lint render-check test-engine unit

# The engine, plus what the push tests need: Debian's docker-registry and htpasswd.
test-engine:
	scripts/host-setup.sh --test

unit: setup
	$(BIN)/pytest

## Build speed, image size and layer sharing against a naive Dockerfile, in one invocation: a table on stdout
## and bench/results/ (results.md, results.json, chart.png). About 30 minutes and ~30 GB of disk at BENCH_RUNS=3;
## not part of `make test`. It removes every image but the bootstrapped bases.
bench: setup test-engine
	$(BIN)/uv sync --frozen --extra dev --extra bench --quiet
	$(BIN)/python bench/bench.py

## The cold build on each engine of the test bed (20.10, 28.5 overlay2, 28.5 containerd store) against the
## naive Dockerfile on the same engine, and the image against its committed digests there:
## bench/results/engines.{md,json}. About 25 minutes at BENCH_RUNS=1 (its default); removes what it builds,
## and the inner engines.
bench-engines: setup test-engine
	$(BIN)/uv sync --frozen --extra dev --extra bench --quiet
	$(BIN)/python bench/bench.py --engines

## The first `imgbuild push` of the default image against `docker push` of it, each to an empty local registry, and a
## second push of the same bytes (from the blob cache): bench/results/push.{md,json}. About 6 minutes at BENCH_RUNS=1.
bench-push: setup test-engine
	$(BIN)/uv sync --frozen --extra dev --extra bench --quiet
	$(BIN)/python bench/push.py

## `imgbuild test` of the default image 20 times on a loaded machine (a busy loop per CPU, a disk writer):
## each check's PASS/FAIL/SKIP counts and slowest time, in bench/results/repeat/summary.md. About 30 minutes.
test-repeat: setup test-engine
	$(BIN)/imgbuild build --bootstrap-base $(if $(CA_BUNDLE),--ca-bundle $(CA_BUNDLE))
	$(BIN)/python bench/repeat_tests.py --runs $(or $(RUNS),20)

## The suite without the engine-backed tests: seconds, no Docker needed.
quick: setup
	$(BIN)/pytest -m "not engine"

lint: setup
	$(BIN)/ruff check builder smoke_tests tests bench
	$(BIN)/mypy
	$(BIN)/python -m builder.checks.lint_dockerfiles
	$(BIN)/actionlint
	$(BIN)/zizmor --offline --quiet .github/workflows

render: setup
	$(BIN)/imgbuild render --all

render-check: setup
	$(BIN)/imgbuild render --all --check
	$(BIN)/imgbuild lock --all --check

## Re-resolve every variant's lock (uv, hashes), then render the contexts that carry them.
lock: setup
	$(BIN)/imgbuild lock --all; $(BIN)/imgbuild render --all

## The torch-size reproducibility check (not in CI: two cold torch builds, ~15 minutes, ~15 GB): the base
## bootstrapped anew and the default image built without cache, twice; prints "reproducible: <image id>".
REPRO_VARIANT ?= 2.7.1-cu126-debian12-runtime
verify-repro: setup engine
	$(BIN)/imgbuild verify-repro $(REPRO_VARIANT) --rebootstrap $(if $(CA_BUNDLE),--ca-bundle $(CA_BUNDLE))

## The torch image's committed manifest (not in CI: ~8 minutes, the compression of 6 GB on 2 CPUs): the default
## image built, pushed to a local docker-registry, and its manifest digest checked against its lock's.
verify-digests: setup test-engine
	$(BIN)/pytest -m heavy tests/engine/test_build.py

## The workflows rehearsed here (tests/rehearsal): images.yml and variant.yml read from their files and run in their
## jobs' order against two local registries (staging, public), on small images: a pull request, main with a failure
## injected into one variant, and main unchanged; then it checks what the registries serve. A few minutes.
pipeline: setup test-engine
	$(BIN)/python -m tests.rehearsal

## The README's JupyterLab screenshot, taken by the browser test (needs the engine, chromium and the jupyter image).
screenshot: setup test-engine
	IMGBUILD_SCREENSHOT=$(CURDIR)/docs/jupyterlab.png $(BIN)/pytest tests/checks/test_jupyter_browser.py -k uid_1000

## Regenerate the golden Dockerfiles in tests/golden/ on purpose, after a reviewed template change.
golden: setup
	$(BIN)/python -m tests.golden_update

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
