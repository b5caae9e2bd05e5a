"""Witnesses and publication: sending checkpoints to witnesses, the witness server, tlog-tiles
publishing and the monitor that follows them.
"""

__all__: list[str] = []
