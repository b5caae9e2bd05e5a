"""Worker processes for `log verify`: starting a pool safely and running tasks with a bounded window.

A pool is only an accelerator: when none can be started safely the verifier
runs every task in this process, and a worker that dies is answered by
re-running its task here, so no verdict ever depends on a worker.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, TypeVar

R = TypeVar("R")


def thread_count() -> int:
    """Threads of this process, native ones included where the OS tells."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def main_is_importable() -> bool:
    """forkserver and spawn children re-import __main__: only a real file or module will do."""
    main = sys.modules.get("__main__")
    if main is None:
        return True
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None):
        return True
    path = getattr(main, "__file__", None)
    return path is None or os.path.isfile(path)


def make_pool(processes: int) -> ProcessPoolExecutor | None:
    """A worker pool started safely, or None when none can be (verify then runs in-process).

    fork only while this process has a single thread (forking a threaded
    process can copy a lock some other thread holds); else forkserver, when
    the children can re-import __main__ (not a script read from stdin).
    """
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and thread_count() == 1:
        method = "fork"
    elif "forkserver" in methods and main_is_importable():
        method = "forkserver"
    else:
        return None
    try:
        return ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context(method))
    except (OSError, ValueError, ImportError):
        return None


def run_ordered(
    pool: ProcessPoolExecutor | None,
    fn: Callable[..., R],
    tasks: Iterable[tuple[Any, ...]],
    window: int,
    on_error: Callable[[tuple[Any, ...], BaseException], R],
) -> Generator[R]:
    """`fn(*task)` for each task, results in task order, at most `window` in flight.

    Tasks are taken from the iterable only as they are submitted, so memory
    stays flat. Without a pool they run lazily in this process. A task whose
    worker fails yields `on_error(task, exc)`.
    """
    if pool is None:
        for t in tasks:
            yield fn(*t)
        return
    it = iter(tasks)
    futs: list[tuple[tuple[Any, ...], Future[R]]] = []
    more = True
    try:
        while more or futs:
            while more and len(futs) < window:
                try:
                    t = next(it)
                except StopIteration:
                    more = False
                    break
                futs.append((t, pool.submit(fn, *t)))
            if not futs:
                break
            task, fut = futs.pop(0)
            try:
                yield fut.result()
            except Exception as exc:
                yield on_error(task, exc)
    finally:
        for _, f in futs:
            f.cancel()
