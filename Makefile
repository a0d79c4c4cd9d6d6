# Developer entry points. `make setup` makes .venv (the collector and dev tools); agent
# environments are made by the collector itself on first use (~/.cache/fwbench/envs).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SOURCES := pyproject.toml proto/pyproject.toml agents/runtime/pyproject.toml

.PHONY: setup run lint proto test test-plugins test-main bench clean

setup: $(STAMP)

$(STAMP): $(SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --config-settings editable_mode=compat \
		-e ./proto -e ./agents/runtime -e '.[dev]'
	touch $@

run: setup
	$(BIN)/collector run --agents torch-cpu --workloads gemm,conv2d,resnet18 \
		--phases train,infer --batch-sizes 1,8

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

proto: setup
	$(BIN)/python proto/generate.py

# Plugin unit tests run inside the plugin's own agent environment, where its framework is.
test-plugins: setup
	torch_python=$$($(BIN)/collector env torch-cpu) && \
	$$torch_python -m pip install --quiet pytest pytest-timeout && \
	$$torch_python -m pytest -p no:cacheprovider tests/torch_plugin

test-main: setup
	$(BIN)/pytest --ignore=tests/torch_plugin

test: lint test-plugins test-main

bench: setup
	$(BIN)/python tests/benchmarks/bench_harness.py

clean:
	rm -rf $(VENV) build .mypy_cache .pytest_cache .ruff_cache
