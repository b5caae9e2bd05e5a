"""The folds' declarations: every event type has a reader or is ignored on purpose, every table one owner."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from mnemolog.eventlog.verify.trust import GENESIS_TYPE, ROTATION_TYPE
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.projections import engine, schema
from mnemolog.projections.fold import PASS_TABLES
from mnemolog.substrate.events import REGISTRY

CATALOGUE = set(v.TOUCHES) | v.NO_TOUCHES | {t for t, _ in REGISTRY} | {GENESIS_TYPE, ROTATION_TYPE}


def test_every_event_type_is_read_by_a_fold_or_ignored_on_purpose() -> None:
    read = {t for f in engine.FOLDS for t in f.HANDLES}
    assert CATALOGUE - read - engine.IGNORED == set()
    assert read & engine.IGNORED == set()
    assert read <= CATALOGUE and engine.IGNORED <= CATALOGUE  # no declaration of a type that is not


def test_every_table_has_exactly_one_owner() -> None:
    owners = [t for f in engine.FOLDS for t in f.TABLES] + [*PASS_TABLES, *engine.ENGINE_TABLES]
    twice = [t for t, n in Counter(owners).items() if n > 1]
    assert twice == []
    assert set(owners) == set(schema.TABLES) | set(schema.OWNED_ELSEWHERE)


def test_no_fold_imports_another() -> None:
    # import-linter holds this too (pyproject.toml); here it reads one module's imports directly.
    modules = {f.__module__ for f in engine.FOLDS}
    assert len(modules) == len(engine.FOLDS)
    root = Path(schema.__file__).parent
    for module in modules:
        path = root.joinpath(*module.split(".")[2:]).with_suffix(".py")
        tree = ast.parse(path.read_text("utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert imported & (modules - {module}) == set(), module
