"""`alias`: a flat name of the `Substrate` that is a feature service's method, declared once.

The README documents flat names (`mem.capture(...)`, `mem.build_context(...)`);
the method itself lives in its feature's service (`mem.knowledge.capture`,
`mem.context.build`). An alias is a class attribute that hands out the
service's bound method, so the parameters, the docstring, `help()` and
`inspect.signature` are the service's, and mypy --strict checks a call
against the service's signature (the ParamSpec carries it): no forwarder
re-declares what the service declares.

The service's module need not be imported to declare an alias: `deferred`
names a class by module and name, and an alias built from one of its
methods imports the module the first time the method itself is asked for
(the class attribute, `help()`); an instance's alias needs only the name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


class alias(Generic[S, P, R]):  # lower case: used in a class body as `property` is
    """`name = alias("service", Service.method)`: `obj.name` is `obj.service.method`.

    On the class it is the service's function itself, which is what `help()` shows.
    """

    def __init__(self, service: str, method: Callable[Concatenate[S, P], R]) -> None:
        self.service = service
        self._method = method
        self.name: str = method.__name__

    @property
    def method(self) -> Callable[Concatenate[S, P], R]:
        """The service's function (its module imported now if it was deferred)."""
        m: Any = self._method
        if isinstance(m, _DeferredMethod):
            m = self._method = m.resolve()
        resolved: Callable[Concatenate[S, P], R] = m
        return resolved

    @property
    def __wrapped__(self) -> Callable[Concatenate[S, P], R]:
        return self.method

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Callable[Concatenate[S, P], R]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> Callable[P, R]: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> Any:
        if obj is None:
            return self.method
        bound: Callable[P, R] = getattr(getattr(obj, self.service), self.name)
        return bound


class _DeferredMethod:
    """A method of a class not imported yet: its name now, the function on `resolve()`."""

    def __init__(self, cls: deferred, name: str) -> None:
        self.cls = cls
        self.__name__ = name

    def resolve(self) -> Any:
        return getattr(self.cls.resolve(), self.__name__)


class deferred:  # lower case: stands where a class name would
    """A class named by its module and name, imported on `resolve()`; its methods are deferred too."""

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.name = name

    def resolve(self) -> type:
        cls: type = getattr(importlib.import_module(self.module), self.name)
        return cls

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _DeferredMethod(self, name)
