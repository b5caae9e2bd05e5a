"""Creates and caches `.venv-aas`, a venv holding the reference implementation.

The PyPI distribution `atomic-agents-stack` installs the import name
`atomic_agents`, which the unrelated `atomic-agents` package also claims, so it
can never share `.venv`. The interop tests call `ensure_aas_venv()`; it builds
the venv once (`python -m venv` + `pip install atomic-agents-stack`), marks it
with a stamp file, and afterwards only checks the stamp. Without network the
install fails and the caller skips with the pip output as the reason.

Run `python tests/projections/vault/aas_venv.py` to build it by hand.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
VENV_DIR = REPO_ROOT / ".venv-aas"
DISTRIBUTION = "atomic-agents-stack"
_STAMP = VENV_DIR / ".installed"
_LOCK = VENV_DIR / ".install.lock"


def venv_python(venv: Path = VENV_DIR) -> Path:
    return venv / "bin" / "python"


def ensure_aas_venv(venv: Path = VENV_DIR) -> tuple[Path | None, str]:
    """Return (python of the venv, "") or (None, why it could not be built)."""
    stamp = venv / _STAMP.name
    python = venv_python(venv)
    if stamp.exists() and python.exists():
        return python, ""
    venv.mkdir(parents=True, exist_ok=True)
    # Two pytest processes may race here; the loser waits and reuses the result.
    with open(venv / _LOCK.name, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and python.exists():
            return python, ""
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--timeout",
                "20",
                "--retries",
                "1",
                DISTRIBUTION,
            ],
        ]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        for cmd in steps:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                return None, f"`{' '.join(cmd[-2:])}` failed: {' | '.join(tail)}"
        stamp.write_text(DISTRIBUTION + "\n")
    return python, ""


if __name__ == "__main__":
    py, why = ensure_aas_venv()
    print(py if py else f"could not build {VENV_DIR}: {why}")
    sys.exit(0 if py else 1)
