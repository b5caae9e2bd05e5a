"""The payload base class: a frozen model that knows its event type and version.

A payload class names its `TYPE` and `TV`; defining it registers it, so the
registry of every (type, tv) is built from the classes themselves (a domain
module of this package adds its events without editing a shared list). The
only way to write an event is `Session.append(payload)`, which takes type
and tv from the class: a payload cannot be signed under another type's name.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from pydantic import (
    BaseModel,
    ConfigDict,
    ModelWrapValidatorHandler,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from mnemolog.eventlog.errors import BadInput
from mnemolog.eventlog.vocabulary.events import NO_TOUCHES, TOUCH_PREV, TOUCHES, chained, upcast_chain_end
from mnemolog.substrate.events.limits import check_unicode

__all__ = ["CURRENT_TV", "REGISTRY", "UNICODE_CHECKED", "Chained", "Payload", "payload_class"]

#: Validation context key (`model_validate(..., context={UNICODE_CHECKED: True})`): the caller
#: has shown that no text in the input holds a lone surrogate.
UNICODE_CHECKED: Final = "unicode_checked"

# (type, tv) -> the model of that payload version; type -> the tv written today.
REGISTRY: dict[tuple[str, int], type[Payload]] = {}
CURRENT_TV: dict[str, int] = {}


class Payload(BaseModel):
    """An event payload. Subclasses set TYPE and TV; abstract bases set neither."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    TYPE: ClassVar[str]
    TV: ClassVar[int] = 1
    # False for a model kept only to document an old tv (it is read through upcasters).
    WRITABLE: ClassVar[bool] = True

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if "TYPE" not in cls.__dict__:
            return  # an abstract base shared by several payloads
        key = (cls.TYPE, cls.TV)
        if key in REGISTRY and REGISTRY[key] is not cls:
            raise TypeError(f"{cls.__qualname__}: {cls.TYPE} tv {cls.TV} is {REGISTRY[key].__qualname__}")
        if cls.TYPE not in TOUCHES and cls.TYPE not in NO_TOUCHES:
            raise TypeError(
                f"{cls.__qualname__}: say which memories {cls.TYPE} touches in "
                "mnemolog.eventlog.vocabulary.events (TOUCHES, or NO_TOUCHES)"
            )
        REGISTRY[key] = cls
        if cls.WRITABLE:
            if upcast_chain_end(cls.TYPE) != cls.TV:
                raise TypeError(
                    f"{cls.__qualname__}: {cls.TYPE} tv {cls.TV} is written, but the upcasters "
                    f"bring old payloads to tv {upcast_chain_end(cls.TYPE)}"
                )
            if chained(cls.TYPE, cls.TV) and TOUCH_PREV not in cls.model_fields:
                raise TypeError(
                    f"{cls.__qualname__}: {cls.TYPE} tv {cls.TV} touches memories and must carry the "
                    "back-chain: derive it from events.base.Chained"
                )
            CURRENT_TV[cls.TYPE] = cls.TV

    @model_validator(mode="wrap")
    @classmethod
    def _bad_input(cls, data: Any, handler: ModelWrapValidatorHandler[Payload]) -> Payload:
        # A field of the wrong type is bad input (exit 65) like any limit, wherever the
        # payload is built; the limits' own checks raise their errors directly.
        try:
            return handler(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(x) for x in first.get("loc", ()))
            what = cls.__dict__.get("TYPE", cls.__name__)
            raise BadInput(f"{what}: {loc}: {first.get('msg')}", field=loc) from None

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any, info: ValidationInfo) -> Any:
        # Every text field, nested ones included: a lone surrogate cannot be encoded. A caller
        # that has shown the whole input holds none (UNICODE_CHECKED: an import's line, strict
        # UTF-8 without a surrogate escape) spares the walk; the fields' own checks still run.
        if info.context is not None and info.context.get(UNICODE_CHECKED):
            return data
        if isinstance(data, dict):
            for k, v in data.items():
                check_unicode(v, str(k))
        return data

    def to_data(self) -> dict[str, Any]:
        """The map stored in the entry: None-valued optional fields are left out."""
        return self.model_dump(mode="python", exclude_none=True)


class Chained(Payload):
    """A payload that touches memories: `touch_prev` maps each to the seq of the previous entry
    that touched it (-1: none did). Session.append fills it in; callers leave it out."""

    touch_prev: dict[str, int] | None = None


def payload_class(type_: str, tv: int) -> type[Payload] | None:
    """The model of a payload version, if one is defined."""
    return REGISTRY.get((type_, tv))
