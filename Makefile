# Developer entry points. `make setup` makes .venv (the collector and dev tools); agent
# environments are made by the collector itself on first use (~/.cache/fwbench/envs).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SOURCES := pyproject.toml proto/pyproject.toml agents/runtime/pyproject.toml

.PHONY: setup system-deps docker-deps slurm-deps images images-deb run lint proto docs test test-fast test-plugins test-main test-full test-stress stress-tests test-time bench clean

# Every test target keeps where its time went in one folder a make command (test-runs/UTC-TIME,
# test-runs/latest the newest): each stage's start and end with the host's busy, idle, iowait
# and steal time over it, and every test's duration (junit XML). `make test-time` prints it;
# `make test` prints it at its end. tests/suite_clock.py says how (standard library only).
ifndef FWBENCH_TEST_RUN
FWBENCH_TEST_RUN := $(CURDIR)/test-runs/$(shell date -u +%Y%m%dT%H%M%SZ)
endif
export FWBENCH_TEST_RUN
CLOCK := $(PYTHON) tests/suite_clock.py
# Python writes its bytecode caches here even where the environment asks it not to
# (PYTHONDONTWRITEBYTECODE, set on some hosts, this project's CI among them): the collector's
# sources are installed editable and the suite starts it hundreds of times, each start
# compiling them again without a cache (0.45 s of CPU a start on an AMD EPYC family 25), and
# pytest would rewrite every test module in every worker of every run.
unexport PYTHONDONTWRITEBYTECODE
# $(call clocked,STAGE,COMMAND): COMMAND recorded as the stage STAGE; `status` takes its exit
# status when it fails. $(call timed,STAGE,COMMAND): the same, exiting with that status. A
# recipe of several lines starts and stops its stage on lines of their own (one that fails
# leaves its stage never ended, which the report says).
clocked = $(CLOCK) start $(1); s=0; $(2) || s=$$?; $(CLOCK) stop $(1) $$s; [ $$s = 0 ] || status=$$s
timed = status=0; $(call clocked,$(1),$(2)); exit $$status

setup: $(STAMP)

# Editable installs in compat mode: each package's folder as a plain path entry (a .pth line),
# which mypy and the tests that put a changed copy first on PYTHONPATH rely on; the import hooks
# of the other modes would not give way. Its banner (a transitional mode) is silenced.
# pip bootstraps uv, which installs the rest (the same editable installs, wheels in parallel
# from its cache); modules compile on their first import, only those imported (above).
$(STAMP): $(SOURCES)
	@$(call timed,setup,$(PYTHON) -m venv $(VENV) \
		&& $(BIN)/pip install --quiet --upgrade pip uv \
		&& $(BIN)/uv pip install --quiet --python $(BIN)/python \
			--config-settings editable_mode=compat -e ./proto -e ./agents/runtime -e '.[dev]')
	touch $@

run: setup
	$(BIN)/collector run --agents torch-cpu --workloads gemm,conv2d,resnet18 \
		--phases train,infer --batch-sizes 1,8

lint: setup
	@$(CLOCK) start lint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python agents/lint_imports.py
	@$(CLOCK) stop lint 0

proto: setup
	$(BIN)/python proto/generate.py

# The generated reference pages (tests/docs and tests/collector/test_schema_docs.py check them).
docs: setup
	$(BIN)/collector schema > docs/results-schema.md
	$(BIN)/typer fwbench.collector.cli utils docs --name collector --output docs/cli.md
	$(BIN)/python -c 'import html, pathlib; p = pathlib.Path("docs/cli.md"); \
		p.write_text(html.unescape(p.read_text("utf-8")), "utf-8")'  # Typer writes &#x27; for '

# Each plugin's own tests and the plugin contract suite run inside the environment of the agent
# whose manifest says it represents the plugin ([tests] in agents/manifests/*.toml):
# `AGENT PLUGIN FOLDER...` lines, derived from the manifests (tests/plugin_matrix.py), which
# also runs them (--run), two agents at a time.
PLUGIN_MATRIX = $(BIN)/python tests/plugin_matrix.py

# Host tools the tests use: g++ (torch.compile, the torch agents' "compile" mode), cmake (with
# g++, llama-cpp-python's build of llama.cpp in the llamacpp agents' environment), promtool
# (Debian's prometheus package) to lint the agents' /metrics, and chromium with a font to open
# `collector report` pages headless.
system-deps:
	@$(CLOCK) start system-deps
	@missing=""; command -v g++ >/dev/null || missing="$$missing g++"; \
	command -v cmake >/dev/null || missing="$$missing cmake"; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	[ -d /usr/share/fonts/truetype/dejavu ] || missing="$$missing fonts-dejavu-core"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@$(CLOCK) stop system-deps 0

# A real single-node Slurm for the Slurm launcher's tests (tests/slurm start slurmctld and
# slurmd themselves, in a temporary folder): Debian's slurm-wlm 22.05 and munge.
slurm-deps:
	@$(CLOCK) start slurm-deps
	@command -v slurmctld >/dev/null && command -v munged >/dev/null || { \
		echo "installing slurm-wlm munge"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq --no-install-recommends slurm-wlm munge; }
	@$(CLOCK) stop slurm-deps 0

# Docker for the image and container tests (tests/docker): when no engine answers, Debian's
# docker.io (dockerd, and a docker CLI whose built-in BuildKit client builds the images) is
# installed and started in the background; where python:3.11-slim-bookworm cannot be pulled
# (no registry), a base is made from Debian packages (mmdebstrap), which builds then use.
DOCKERD_LOG := /var/log/fwbench-dockerd.log

docker-deps: setup
	@$(CLOCK) start docker-deps
	@if ! docker info >/dev/null 2>&1; then \
		command -v dockerd >/dev/null || { echo "installing docker.io"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
				apt-get install -y -qq --no-install-recommends docker.io; }; \
		echo "starting dockerd (log: $(DOCKERD_LOG))"; \
		nohup dockerd >$(DOCKERD_LOG) 2>&1 & \
		for i in $$(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done; \
		docker info >/dev/null 2>&1 || { tail -20 $(DOCKERD_LOG); exit 1; }; \
	fi
	@docker image inspect python:3.11-slim-bookworm >/dev/null 2>&1 \
		|| docker image inspect fwbench/base:bookworm >/dev/null 2>&1 \
		|| docker pull -q python:3.11-slim-bookworm 2>/dev/null \
		|| { command -v mmdebstrap >/dev/null || DEBIAN_FRONTEND=noninteractive \
				apt-get install -y -qq --no-install-recommends mmdebstrap; \
			$(BIN)/collector images base; }
	@$(CLOCK) stop docker-deps 0

# The CPU agents' images (cached: seconds when nothing changed).
images: docker-deps
	$(BIN)/collector images build

# Debian 12's PyTorch on four BLAS libraries (images/torch-deb: openblas, blis, mkl, netlib);
# images that declare themselves by labels, no manifest. Minutes on first use, then seconds.
images-deb: docker-deps
	$(BIN)/python images/torch-deb/build.py

test-plugins: setup system-deps
	@$(call timed,plugins,$(PLUGIN_MATRIX) --run --jobs 2)

# docker-deps made sure an engine runs: a Docker test that cannot reach it fails, not skips.
# TEST_WORKERS pytest-xdist workers share the suite, a module (or a folder that shares a
# daemon) whole on one worker (tests/conftest.py); the tests whose assertions depend on timings
# (marked `timing`) hold on a busy host, so they run there too (`make test-stress` shows it).
# Then the few marked `quiet`, whose premise is an idle host, run alone (each checks the host
# first, and says so where it is busy). Both parts run even when the first fails, and the
# target fails if either did. Three workers on two CPUs: many tests wait (on containers,
# Slurm, heartbeats, timeouts), and two workers left the CPUs idle 10% of the main suite.
TEST_WORKERS ?= 3
MAIN_PYTEST = FWBENCH_REQUIRE_DOCKER=1 FWBENCH_REQUIRE_SLURM=1 $(BIN)/pytest --durations=30 \
	--ignore=tests/plugin_contract \
	$$($(PLUGIN_MATRIX) | while read -r agent plugin folders; do \
		for f in $$folders; do printf -- '--ignore=%s ' $$f; done; done)

# $(call workers_then_quiet,PYTEST,MARKS,NAME): PYTEST on TEST_WORKERS workers for the tests
# `MARKS not quiet`, then alone for `MARKS quiet`; both always, failing if either did; the
# stages NAME-workers and NAME-quiet, each with its junit file in the run's folder.
JUNIT = --junitxml=$(FWBENCH_TEST_RUN)/$(1).xml -o junit_family=xunit2
workers_then_quiet = status=0; \
	$(call clocked,$(3)-workers,$(1) -n $(TEST_WORKERS) --dist loadscope -m "$(2)not quiet" \
		$(call JUNIT,$(3)-workers)); \
	$(call clocked,$(3)-quiet,$(1) -m "$(2)quiet" $(call JUNIT,$(3)-quiet)); \
	exit $$status

test-main: setup system-deps docker-deps slurm-deps
	@$(call workers_then_quiet,$(MAIN_PYTEST),not full and ,main)

# The timing-sensitive part of the suite (marked `timing` or `quiet`) as `make test-main` runs
# it, with two busy processes spinning beside it from start to end (tests/stress.py): every
# outcome must hold on a loaded host; the `quiet` tests check the host and skip, saying so.
test-stress: setup system-deps docker-deps slurm-deps
	@$(call timed,stress,$(PYTHON) tests/stress.py --busy 2 -- $(MAKE) --no-print-directory \
		stress-tests)
	@$(CLOCK) report $(FWBENCH_TEST_RUN)

stress-tests:
	@$(call workers_then_quiet,$(MAIN_PYTEST),not full and (timing or quiet) and ,stress)

# The stages in turn (the first that fails stops the rest, as make does), then where the time
# went: each stage, the folders, the slowest tests.
test:
	@status=0; $(MAKE) --no-print-directory lint test-plugins test-main || status=$$?; \
	$(CLOCK) report $(FWBENCH_TEST_RUN); exit $$status

# The newest run's report (test-runs/latest: whichever make command started last).
test-time:
	@$(CLOCK) report test-runs/latest

# What `make test` leaves out because it repeats, through another path, a component it runs
# (docs/testing.md): every catalogue model stepped and swept, in the plugins' tests (Keras'
# on each backend), their contract suites and the equivalence numerics (tests/stepped_models.py),
# and the main suite's tests marked `full` (every agent through every launcher, the Debian BLAS
# images, ...). Run it when a model's definition, weight loading or a launch path changes.
test-full: setup system-deps docker-deps slurm-deps
	@status=0; \
	$(call clocked,full-plugins,FWBENCH_FULL=1 $(PLUGIN_MATRIX) --run --jobs 2); \
	$(call clocked,full-equivalence,FWBENCH_FULL=1 $(BIN)/pytest \
		tests/equivalence/test_equivalence.py $(call JUNIT,full-equivalence)); \
	$(call clocked,full-main,$(MAIN_PYTEST) -n $(TEST_WORKERS) --dist loadscope -m full \
		$(call JUNIT,full-main)); \
	$(CLOCK) report $(FWBENCH_TEST_RUN); exit $$status

# The quick loop while developing (under 5 minutes on 2 CPUs): lint and the tests that need no
# agent environment, no Docker, no host tools and no timings (the collector against fakes and
# in-process, the runtime in-process, the spec, the docs, the example agent as a process).
# What it leaves to `make test`: real agents, Docker, Slurm, the fault injection (tests/faults),
# conformance, worlds, the fake cluster, and every test marked `timing` or `quiet`.
FAST_TESTS = tests/collector tests/runtime tests/spec tests/docs tests/examples

test-fast: lint
	@$(call timed,fast,$(BIN)/pytest $(FAST_TESTS) -n $(TEST_WORKERS) --dist loadscope \
		-m "not agent and not docker and not timing and not quiet" $(call JUNIT,fast))

bench: setup
	$(BIN)/python tests/benchmarks/bench_harness.py

clean:
	rm -rf $(VENV) build .mypy_cache .pytest_cache .ruff_cache test-runs
