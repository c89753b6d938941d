# make demo  — the main job (the study)       make test — the test suite       make bench — benchmarks
# make test-latest — the `latest` subset on Python 3.12 with the newest jax/flax/optax/grain
# make lock — regenerate constraints/ (what each environment installs, every package pinned)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
CONSTRAINTS := constraints/py311.txt

# Python 3.12 for the newest-versions environment: python3.12 on PATH, else pyenv's 3.12.
PYTHON_LATEST ?= $(shell for p in python3.12 $$(pyenv root 2>/dev/null)/versions/3.12*/bin/python3.12; do \
                   "$$p" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null && { echo "$$p"; break; }; done)
LATEST       := .venv-latest
LATEST_PY    := $(LATEST)/bin/python
LATEST_STAMP := $(LATEST)/.installed
LATEST_CONSTRAINTS := constraints/latest-py312.txt

.PHONY: demo test test-latest bench venv venv-latest lock clean

venv: $(STAMP)

# The pinned set is installed by uv (itself pinned, from PyPI), or by pip where uv cannot be had.
# On the 2-core CPU on 2026-11-25, from an empty venv with empty caches: uv 26 s, pip 51 s (pip spends
# them on its own CPU). --compile-bytecode as pip does: these machines set PYTHONDONTWRITEBYTECODE, and
# without .pyc files every loader worker compiled JAX's sources on import (a worker's first batch took
# 3.6-4.1 s instead of 1.4-1.5 s, and the demo 10 min 27 s). Not uv's --compile-bytecode, which
# compiles every file: compileall without the packages' own tests and the install tools (pip,
# setuptools), which nothing the demo or the suite runs imports. On the 2-core AMD EPYC on 2026-12-02,
# from the warm cache, one after the other: uv with --compile-bytecode 18.6 s; uv without 2.8 s and
# compileall without the tests 10.3 s. INSTALL_WITH=pip: pip only (pip compiles what it installs).
UV_VERSION   ?= 0.9.5
INSTALL_WITH ?= uv
NO_COMPILE   := /tests?/|/site-packages/(pip|setuptools|_distutils_hack)/
define install
	test "$(INSTALL_WITH)" = uv && $(1) -m pip install --quiet uv==$(UV_VERSION) \
	  && $(1) -m uv pip install --quiet --python $(1) -c $(2) -e '.[dev]' \
	  && { $(1) -m compileall -q -j 0 -x '$(NO_COMPILE)' "$$($(1) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
	       || echo "warning: the files listed above did not byte-compile; each process compiles them on import" >&2; } \
	|| { $(1) -m pip install --quiet --upgrade pip && $(1) -m pip install --quiet -c $(2) -e '.[dev]'; }
endef

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(call install,$(PY),$(CONSTRAINTS))
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m experiments study --preset quick

# The suite runs in TEST_WORKERS processes (pytest-xdist; a test file per process at a time, so a
# module's fixtures are built once), then the tests that check /dev/shm for leftovers run alone: a
# segment another test makes while one of them runs would count as its leak. On the 2-core CPU one
# process kept 1.07 cores busy and took 787 s of tests; two, then the guarded ones alone, 461 s + 86 s.
# TEST_WORKERS=1: one process.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not shm_guard"; a=$$?; \
	$(PY) -m pytest -q -m shm_guard; b=$$?; \
	test $$a -eq 0 -a $$b -eq 0

bench: $(STAMP)
	$(PY) -m benchmarks

venv-latest: $(LATEST_STAMP)

$(LATEST_STAMP): pyproject.toml $(LATEST_CONSTRAINTS)
	@test -n "$(PYTHON_LATEST)" || { echo "error: no Python 3.12 found (python3.12 on PATH or pyenv's 3.12.x); run make test-latest PYTHON_LATEST=/path/to/python3.12" >&2; exit 1; }
	test -x $(LATEST_PY) || $(PYTHON_LATEST) -m venv $(LATEST)
	$(call install,$(LATEST_PY),$(LATEST_CONSTRAINTS))
	touch $(LATEST_STAMP)

test-latest: $(LATEST_STAMP)
	$(LATEST_PY) -m pytest -q -m latest

# Regenerates both constraints files from pyproject.toml's ranges: Python 3.11 with every direct
# dependency at its lower bound, Python 3.12 with the newest release in range from the package index.
lock:
	@test -n "$(PYTHON_LATEST)" || { echo "error: no Python 3.12 found; run make lock PYTHON_LATEST=/path/to/python3.12" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || { echo "error: PYTHON=$(PYTHON) is not Python 3.11, which constraints/py311.txt is for; run make lock PYTHON=/path/to/python3.11" >&2; exit 1; }
	rm -rf .venv-lock-oldest .venv-lock-latest
	$(PYTHON) -m venv .venv-lock-oldest
	.venv-lock-oldest/bin/python constraints/lock.py lowest > .venv-lock-oldest/lowest.txt
	.venv-lock-oldest/bin/python -m pip install --quiet -c .venv-lock-oldest/lowest.txt -e '.[dev]'
	.venv-lock-oldest/bin/python constraints/lock.py freeze $(CONSTRAINTS)
	$(PYTHON_LATEST) -m venv .venv-lock-latest
	.venv-lock-latest/bin/python -m pip install --quiet -e '.[dev]'
	.venv-lock-latest/bin/python constraints/lock.py freeze $(LATEST_CONSTRAINTS)
	rm -rf .venv-lock-oldest .venv-lock-latest
	git diff --stat -- constraints/

clean:
	rm -rf $(VENV) $(LATEST) .venv-lock-oldest .venv-lock-latest .cache
