# Developer entry points. `make setup` makes .venv (the collector and dev tools); agent
# environments are made by the collector itself on first use (~/.cache/fwbench/envs).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SOURCES := pyproject.toml proto/pyproject.toml agents/runtime/pyproject.toml

.PHONY: setup system-deps run lint proto test test-plugins test-main bench clean

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
# Each plugin's own tests run inside its agent's environment (AGENT:FOLDER pairs).
PLUGIN_TESTS := torch-cpu:tests/torch_plugin tf-mkl:tests/tf_plugin jax-cpu:tests/jax_plugin

# Host tools the tests use: g++ (torch.compile, the torch agents' "compile" mode) and
# promtool (Debian's prometheus package) to lint the agents' /metrics.
system-deps:
	@missing=""; command -v g++ >/dev/null || missing="$$missing g++"; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq --no-install-recommends $$missing; \
	fi

test-plugins: setup system-deps
	set -e; for pair in $(PLUGIN_TESTS); do \
		agent=$${pair%%:*}; folder=$${pair#*:}; \
		python=$$($(BIN)/collector env $$agent); \
		$$python -m pip install --quiet pytest pytest-timeout; \
		echo "== $$folder in the $$agent environment"; \
		$$python -m pytest -p no:cacheprovider $$folder; \
	done

test-main: setup system-deps
	$(BIN)/pytest $(foreach pair,$(PLUGIN_TESTS),--ignore=$(lastword $(subst :, ,$(pair))))

test: lint test-plugins test-main

bench: setup
	$(BIN)/python tests/benchmarks/bench_harness.py

clean:
	rm -rf $(VENV) build .mypy_cache .pytest_cache .ruff_cache
