"""`alias`: a flat name of the `Substrate` that is a feature service's method, declared once.

The README documents flat names (`mem.capture(...)`, `mem.build_context(...)`);
the method itself lives in its feature's service (`mem.knowledge.capture`,
`mem.context.build`). An alias is a class attribute that hands out the
service's bound method, so the parameters, the docstring, `help()` and
`inspect.signature` are the service's, and mypy --strict checks a call
against the service's signature (the ParamSpec carries it): no forwarder
re-declares what the service declares.
"""

from __future__ import annotations

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
        self.method = method
        self.__doc__ = method.__doc__
        self.__wrapped__ = method

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Callable[Concatenate[S, P], R]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> Callable[P, R]: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> Any:
        if obj is None:
            return self.method
        bound: Callable[P, R] = getattr(getattr(obj, self.service), self.method.__name__)
        return bound
