# Every target builds .venv from nothing when it is missing or older than pyproject.toml.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PKGS := eventlog projections curators substrate cli

.PHONY: demo install test test-fast lint typecheck pytest bench clean

# Test workers (pytest-xdist). Tests marked `serial` (processes, locks, time bounds)
# run afterwards on their own; `--dist loadfile` keeps a file on one worker, so its
# module fixtures are built once and its progress line means something.
JOBS ?= 2
PYTEST := $(BIN)/pytest -q -p no:cacheprovider --file-progress

# Bytecode is written during test runs even where the environment turns it off
# (PYTHONDONTWRITEBYTECODE=1): otherwise each worker compiles the package and
# rewrites the asserts of some 300 test modules from source on every run (about
# 6 CPU-seconds per worker before the first test), and so does every `mnemolog`
# process a test starts. An empty value is off to Python.
pytest test-fast: export PYTHONDONTWRITEBYTECODE :=

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# mypy and import-linter cannot follow setuptools' editable finder, so they check a
# tree of symlinks that spells the installed namespace (mnemolog.<pkg> -> <pkg>/).
.typecheck/mnemolog: Makefile
	rm -rf .typecheck && mkdir -p .typecheck/mnemolog
	for p in $(PKGS); do ln -s ../../$$p .typecheck/mnemolog/$$p; done

demo: $(STAMP)
	$(BIN)/python -m mnemolog.cli.demo

# `mnemolog` on the PATH without activating the venv: a link in $(PREFIX)/bin
# (~/.local/bin by default) to the venv's command, and the bytecode written once.
PREFIX ?= $(HOME)/.local
install: $(STAMP)
	$(BIN)/python -m compileall -q $(PKGS) >/dev/null
	mkdir -p $(PREFIX)/bin
	ln -sf $(CURDIR)/$(BIN)/mnemolog $(PREFIX)/bin/mnemolog
	@echo "installed $(PREFIX)/bin/mnemolog -> $(CURDIR)/$(BIN)/mnemolog"
	@case ":$$PATH:" in *":$(PREFIX)/bin:"*) ;; *) echo "add $(PREFIX)/bin to your PATH";; esac

lint: $(STAMP) .typecheck/mnemolog
	$(BIN)/ruff check $(PKGS) tests bench packaging
	$(BIN)/ruff format --check $(PKGS) tests bench packaging
	cd .typecheck && PYTHONPATH=. ../$(BIN)/lint-imports ../pyproject.toml

typecheck: $(STAMP) .typecheck/mnemolog
	cd .typecheck && MYPYPATH=. ../$(BIN)/mypy --config-file ../pyproject.toml -p mnemolog

pytest: $(STAMP)
	$(PYTEST) -n $(JOBS) --dist loadfile -m "not serial"
	$(PYTEST) -m serial

# The inner loop: everything not marked slow or serial, in parallel.
test-fast: $(STAMP)
	$(PYTEST) -n $(JOBS) --dist loadfile -m "not slow and not serial"

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) .typecheck .pytest_cache .mypy_cache .ruff_cache
