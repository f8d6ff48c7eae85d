# The two commands: `make run` and `make test`. Everything else is what they need.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
# Debian's interpreter: its venv sees BCC's `bcc` module through --system-site-packages.
SYSPY := /usr/bin/python3
SOURCES := $(shell find profiler backends probes flamegraphs cpp_server cmake -type f -not -name '*.pyc' 2>/dev/null) pyproject.toml CMakeLists.txt

RUN_ARGS ?= uvloop_sock

.PHONY: setup system run test test-fast test-cpp test-py lint lint-py typecheck lint-imports lint-cpp format-cpp clean

setup: system $(VENV)/.installed

system:
	@bash scripts/setup-system.sh

$(VENV)/bin/python:
	$(SYSPY) -m venv --system-site-packages $(VENV)

# The backends' lock pins what netprof's own environment shares with every --python environment
# (tests/test_hardening.py checks they agree): its names and versions are constraints of every install
# here (pip takes no hashes in a constraints file), so an upstream release changes neither until the
# lock does.
LOCK := profiler/run/interp-requirements.txt
CONSTRAINTS := build/lock-constraints.txt

$(CONSTRAINTS): $(LOCK)
	@mkdir -p build
	grep -oE '^[A-Za-z0-9_.-]+(\[[^]]*\])?==[^ \\]+' $(LOCK) | sed -E 's/\[[^]]*\]//' > $@

$(VENV)/.deps: $(VENV)/bin/python pyproject.toml requirements-build.txt $(CONSTRAINTS)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-build.txt -c $(CONSTRAINTS)
	@touch $@

# Non-editable install, no build isolation: CMake keeps its tree in build/, so a re-install after an
# edit is incremental, and an unchanged tree skips the install entirely.
$(VENV)/.installed: $(VENV)/.deps $(SOURCES) $(CONSTRAINTS)
	flock build.lock $(PY) -m pip install -q --no-build-isolation ".[test]" -c $(CONSTRAINTS)
	@touch $@

run: setup
	$(VENV)/bin/netprof run $(RUN_ARGS)

# The loader's C++ tests four at a time, those that read the clock alone (cpp_server/CMakeLists.txt says which):
# 25 s against 41 s one by one (2026-12-04).
# CXX: the compiler the wheel's tree was given (scikit-build-core takes Python's sysconfig CXX). ccache keys on its
# name, so with the same one the loader core here is a cache hit of the venv's build (CMakeLists.txt, NETPROF_CCACHE).
WHEEL_CXX = $(shell $(SYSPY) -c 'import sysconfig; print((sysconfig.get_config_var("CXX") or "c++").split()[0])')
test-cpp: system
	CXX=$(WHEEL_CXX) cmake -S . -B build/cpp-tests -G Ninja -DNETPROF_TESTS=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build/cpp-tests --target loader_unit_tests  # not netprof-loader's main(): the venv has the binary
	ctest --test-dir build/cpp-tests --output-on-failure -j 4

# Two passes (tests/conftest.py marks which test goes where): first the tests that measure nothing, four at a
# time on this 2-core host (pytest-xdist: they mostly wait for processes to start; 137 s against 156 s two at a
# time, 2026-11-27; 196 s four at a time against 211 s three, both beside bench/bystander.py, 2026-11-29), then
# the ones that measure (a netprof run, the loader, BPF), one by one with the machine to themselves. Both passes always run; a failure in either
# fails `make test`. A pass that selects nothing (PYTEST_ARGS="-k ...") is no failure of its own; both empty is
# pytest's 5, which .ci/run counts as a failure. Each pass writes its own --junitxml (the first's name gets
# "-concurrent"). --durations: every log (CI's too) lists the slowest tests, for keeping the suite under its
# time limit. NETPROF_NO_PREFETCH=1 in the first pass (profiler/entry.py): with four tests at a time no CPU is
# idle, and its ~90 refused commands would each spend ~0.75 s of CPU on a compile and an import begun ahead.
# PYTHONDONTWRITEBYTECODE unset (some hosts' shells set it): pytest then keeps its rewritten test modules in
# tests/__pycache__, and the second pass and test_tiers's collection skip ~2 s of rewriting each (4.1 s → 2.2 s).
PYTEST_ARGS_CONCURRENT = $(patsubst --junitxml=%.xml,--junitxml=%-concurrent.xml,$(PYTEST_ARGS))
test-py: setup
	@unset PYTHONDONTWRITEBYTECODE; rc=0; empty=0; \
	NETPROF_NO_PREFETCH=1 $(PY) -m pytest -ra -n 4 -m "not serial" --durations=10 $(PYTEST_ARGS_CONCURRENT) \
		|| { r=$$?; if [ $$r = 5 ]; then empty=$$((empty + 1)); else rc=$$r; fi; }; \
	$(PY) -m pytest -ra -m serial --durations=25 $(PYTEST_ARGS) \
		|| { r=$$?; if [ $$r = 5 ]; then empty=$$((empty + 1)); else rc=$$r; fi; }; \
	if [ $$rc = 0 ] && [ $$empty = 2 ]; then rc=5; fi; \
	exit $$rc

# The edit loop's tier: no BPF, no e2e (no netprof run, backend server or loader; tests/conftest.py says
# how a test is classed), under 2 minutes with its set-up check. `make test` still runs everything.
test-fast: setup
	$(PY) -m pytest -q -n 2 -m "not bpf and not e2e" --durations=10 $(PYTEST_ARGS)

# Lint, types, layers and format, all part of `make test` (so of .ci/run): ruff (ruff.toml), mypy
# (mypy.ini, through scripts/typecheck.sh), import-linter's layer contracts ([tool.importlinter] in
# pyproject.toml), clang-format (.clang-format). ruff, mypy and import-linter come with `.[test]`,
# clang-format with scripts/setup-system.sh.
lint: lint-py typecheck lint-imports lint-cpp

lint-py: setup
	$(VENV)/bin/ruff check .

typecheck: setup
	bash scripts/typecheck.sh

# On the sources, not the installed copy: build/typecheck/netprof is the package layout made of links
# to them (typecheck makes it), so an edit needs no reinstall to be checked.
lint-imports: typecheck
	PYTHONPATH=build/typecheck $(VENV)/bin/lint-imports --no-cache

# C++ style (.clang-format at the root): one style for both C++ trees.
CPP_FORMATTED := cpp_server backends/cpp
CPP_FILES = $(shell find $(CPP_FORMATTED) -name '*.cpp' -o -name '*.hpp' -o -name '*.h')

lint-cpp: system
	clang-format --dry-run --Werror $(CPP_FILES)

format-cpp:
	clang-format -i $(CPP_FILES)

test: setup lint test-cpp test-py

clean:
	rm -rf build $(VENV) runs
