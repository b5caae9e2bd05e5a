"""Migration scripts: loading `vN_to_vM.py` files, building the chain, applying one to a unit.

A script is a Python file named `v{N}_to_v{N+1}.py` (no leading zeros) that
defines FROM_VERSION = N, TO_VERSION = N+1, `applies_to(unit)` and
`migrate(unit)` (the script contract of docs/vault.md, Migrations). A script
written for the Atomic Agents runner, which imports its handle type with
`from atomic_agents.migration import MigratableUnit`, runs unchanged: that
import resolves, inside the script only, to this package's protocol. Files starting with `_`
and files not named like a script are ignored (helpers, README.md).
Scripts are operator-authored code and are executed as such.

`apply_script` is the shared body of every backend's apply_unit(): the gate on
applies_to(), requirement 7 check that a claimed unit was bumped on a real run,
and the skip decision on migrate()'s raw return value before provenance keys
are added (so an empty summary on a dry run counts as a skip).
"""

from __future__ import annotations

import builtins
import hashlib
import importlib.util
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from mnemolog.eventlog.errors import MnemologError
from mnemolog.eventlog.store.fsio import read_regular
from mnemolog.substrate.migrations.protocol import (
    MigratableUnit,
    MigrationError,
    MigrationScript,
    MigrationScriptError,
    MigrationTargetInvalid,
    MigrationVersionNotBumped,
    NothingToMigrate,
)

_NAME_RE = re.compile(r"v(\d+)_to_v(\d+)\.py")
MAX_SCRIPT_BYTES = 1024 * 1024


@dataclass(frozen=True)
class LoadedScript:
    """A migration script module that loaded and names its FROM_VERSION and TO_VERSION."""

    name: str
    path: Path
    from_version: int
    to_version: int
    module: ModuleType

    def applies_to(self, unit: MigratableUnit) -> object:
        fn: Callable[[MigratableUnit], object] = self.module.applies_to
        return fn(unit)

    def migrate(self, unit: MigratableUnit) -> object:
        fn: Callable[[MigratableUnit], object] = self.module.migrate
        return fn(unit)


#: The module names a script written for the Atomic Agents runner imports its handle type
#: from; such a script runs here unchanged.
COMPAT_MODULES = ("atomic_agents", "atomic_agents.migration")


def _compat_module() -> ModuleType:
    """`atomic_agents.migration` as a script written for that runner sees it: the same names."""
    from mnemolog.substrate.migrations import protocol

    mod = ModuleType("atomic_agents.migration", "mnemolog's migration protocol under its Atomic Agents name")
    for name in ("MigratableUnit", "MigrationBackend", "MigrationEvent", "MigrationSnapshotRef",
                 "MigrationCapabilities", "MigrationScript"):  # fmt: skip
        setattr(mod, name, getattr(protocol, name))
    mod.AtomicAgentsError = protocol.MigrationError  # type: ignore[attr-defined]
    return mod


def _script_builtins() -> dict[str, Any]:
    """The builtins a script runs with: the real ones, but `import atomic_agents.migration`
    finds the compat module.

    Only the script's own namespace sees this `__import__`; nothing global (sys.modules,
    sys.meta_path) is touched, so a host that has a real `atomic_agents` package keeps it.
    """
    real_import = builtins.__import__
    compat = _compat_module()
    parent = ModuleType("atomic_agents")
    parent.migration = compat  # type: ignore[attr-defined]

    def script_import(
        name: str, globals_: Any = None, locals_: Any = None, fromlist: Any = (), level: int = 0
    ) -> Any:
        if level == 0 and name in COMPAT_MODULES:
            return compat if fromlist and name == "atomic_agents.migration" else parent
        return real_import(name, globals_, locals_, fromlist, level)

    return {**vars(builtins), "__import__": script_import}


def _load(path: Path, from_v: int, to_v: int) -> LoadedScript:
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(f"_mnemolog_migration_{digest}", path)
    if spec is None or spec.loader is None:
        raise MigrationScriptError(f"{path}: cannot be loaded as a Python module", file=str(path))
    module = importlib.util.module_from_spec(spec)
    module.__dict__["__builtins__"] = _script_builtins()
    try:
        source = read_regular(path, MAX_SCRIPT_BYTES)
        exec(compile(source, str(path), "exec"), module.__dict__)
    except MnemologError as exc:
        raise MigrationScriptError(f"{path}: {exc.message}", file=str(path)) from exc
    except (Exception, SystemExit) as exc:
        raise MigrationScriptError(
            f"{path}: loading it raised {type(exc).__name__}: {exc}", file=str(path)
        ) from exc
    for attr in ("FROM_VERSION", "TO_VERSION"):
        value = getattr(module, attr, None)
        if isinstance(value, bool) or not isinstance(value, int):
            raise MigrationScriptError(
                f"{path}: expected an integer {attr}, found {value!r}", file=str(path), field=attr
            )
    for attr in ("applies_to", "migrate"):
        if not callable(getattr(module, attr, None)):
            raise MigrationScriptError(
                f"{path}: expected a function {attr}(unit), found none", file=str(path), field=attr
            )
    if (from_v, to_v) != (module.FROM_VERSION, module.TO_VERSION):
        raise MigrationScriptError(
            f"{path}: the name says v{from_v} -> v{to_v} but the module declares "
            f"FROM_VERSION={module.FROM_VERSION}, TO_VERSION={module.TO_VERSION}",
            file=str(path),
        )
    return LoadedScript(path.name, path, from_v, to_v, module)


def load_scripts(directory: Path) -> list[LoadedScript]:
    """Every script in `directory`, sorted by FROM_VERSION; [] when there is no directory."""
    if not directory.is_dir():
        return []
    scripts: dict[int, LoadedScript] = {}
    for path in sorted(directory.iterdir()):
        m = _NAME_RE.fullmatch(path.name)
        if m is None or not path.is_file():
            continue
        a, b = m.groups()
        if a != str(int(a)) or b != str(int(b)):
            raise MigrationScriptError(
                f"{path}: expected v{int(a)}_to_v{int(b)}.py, found leading zeros", file=str(path)
            )
        from_v, to_v = int(a), int(b)
        if to_v != from_v + 1:
            raise MigrationScriptError(
                f"{path}: a script moves one version (v{from_v} -> v{from_v + 1}), "
                f"found v{from_v} -> v{to_v}",
                file=str(path),
            )
        scripts[from_v] = _load(path, from_v, to_v)
    return [scripts[v] for v in sorted(scripts)]


def build_chain(
    scripts: Sequence[LoadedScript], current: int, target: int, where: Path | str = "the scripts"
) -> list[LoadedScript]:
    """The scripts taking `current` to `target`, in order."""
    if isinstance(target, bool) or not isinstance(target, int) or target < 0:
        raise MigrationTargetInvalid(f"expected a non-negative integer target, found {target!r}")
    if target < current:
        raise MigrationTargetInvalid(
            f"target v{target} is below the current v{current}; migrations are forward-only",
            current=current,
            target=target,
        )
    if target == current:
        raise NothingToMigrate(f"already at v{current}; nothing to migrate", current=current)
    by_from = {s.from_version: s for s in scripts}
    chain = []
    version = current
    while version < target:
        script = by_from.get(version)
        if script is None:
            found = ", ".join(s.name for s in scripts) or "none"
            raise MigrationScriptError(
                f"migration chain v{current} -> v{target} is broken: no v{version}_to_v"
                f"{version + 1}.py in {where} (found: {found})",
                current=current,
                target=target,
            )
        chain.append(script)
        version = script.to_version
    return chain


def apply_script(unit: MigratableUnit, script: MigrationScript) -> dict[str, Any]:
    """applies_to -> migrate -> requirement 7 check -> the summary ({} means skipped)."""
    where = f"{script.name} on {unit.unit_id}"
    try:
        claimed = script.applies_to(unit)
    except MigrationError:
        raise
    except Exception as exc:
        raise MigrationScriptError(f"{where}: applies_to() raised {type(exc).__name__}: {exc}") from exc
    if not claimed:
        return {}
    try:
        summary = script.migrate(unit)
    except MigrationError:
        raise
    except Exception as exc:
        raise MigrationScriptError(f"{where}: migrate() raised {type(exc).__name__}: {exc}") from exc
    if not unit.dry_run:
        found = unit.read_frontmatter().get("schema_version")
        if isinstance(found, bool) or found != script.to_version:
            raise MigrationVersionNotBumped(
                f"{where}: applies_to() claimed the unit but schema_version is {found!r} after "
                f"migrate(), expected {script.to_version}; skip units in applies_to(), not in "
                "migrate()",
                script=script.name,
                unit=unit.unit_id,
            )
    # The skip decision reads the raw return value, before provenance keys make it truthy.
    if not summary:
        return {}
    if not isinstance(summary, dict):
        raise MigrationScriptError(
            f"{where}: migrate() must return a dict (or None/{{}} to skip), returned {type(summary).__name__}"
        )
    return {**summary, "script": script.name, "unit_id": unit.unit_id}
