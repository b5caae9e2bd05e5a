"""Finding the atom list in a model's reply.

Models asked for JSON still wrap it in code fences or prose now and then. This
module owns the tolerant reading (``first_answer``, also used for the
extractor's candidates and the triager's verdict): the JSON values embedded in
the reply are decoded left to right (fences and prose are just text between
them), and the first one with the expected shape, here ``{"atoms": [string,
...]}`` or a bare ``[string, ...]``, is the answer. A value nested inside another is never taken
on its own. Anything else is malformed output, described well enough to debug
a prompt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

#: Cap on embedded-JSON decode attempts: a hostile reply full of brackets must
#: not turn parsing into a quadratic scan.
MAX_DECODE_ATTEMPTS = 512

_OPENERS = re.compile(r"[\[{]")

T = TypeVar("T")


class MalformedOutput(ValueError):
    """The reply holds no JSON value of the expected shape; the message says what it held."""


def extract_atoms(content: str) -> list[str]:
    """The atom strings in ``content``, or MalformedOutput."""
    return first_answer(content, 'a JSON object {"atoms": [string, ...]} or a JSON list of strings', _shape)


def first_answer(content: str, shape: str, read: Callable[[Any], tuple[T | None, str]]) -> T:
    """The first JSON value in ``content`` that ``read`` accepts, read.

    ``read`` returns the answer, or None and what the value held instead.
    MalformedOutput names ``shape`` and what the first value held (or that
    there was no JSON value at all).
    """
    found: list[str] = []
    for value in _json_values(content):
        answer, problem = read(value)
        if answer is not None:
            return answer
        found.append(problem)
    if not found:
        raise MalformedOutput(f"expected {shape}; found no JSON value in {len(content)} characters of output")
    raise MalformedOutput(f"expected {shape}; found {found[0]}")


def _json_values(content: str) -> Iterator[Any]:
    whole = _loads(content.strip())
    if whole is not _NOTHING and not isinstance(whole, dict | list):
        yield whole  # a bare string or number: reported as the wrong shape
        return
    decoder = json.JSONDecoder()
    pos = 0
    for _attempt in range(MAX_DECODE_ATTEMPTS):
        opener = _OPENERS.search(content, pos)
        if opener is None:
            return
        try:
            value, end = decoder.raw_decode(content, opener.start())
        except (ValueError, RecursionError):
            pos = opener.start() + 1
            continue
        yield value
        # Skip the whole value: a list nested in a wrong-shaped object is not
        # an answer the model gave.
        pos = end


_NOTHING: Final = object()


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOTHING


def _shape(value: Any) -> tuple[list[str] | None, str]:
    items: Any
    if isinstance(value, dict):
        if "atoms" not in value:
            return None, f"a JSON object with keys {sorted(value)[:8]!r} and no 'atoms'"
        items = value["atoms"]
        where = "'atoms'"
    else:
        items = value
        where = "the JSON value"
    if not isinstance(items, list):
        return None, f"{where} holding {type(items).__name__}, not a list"
    for index, item in enumerate(items):
        if not isinstance(item, str):
            return None, f"{where} holding a {type(item).__name__} at index {index}, not a string"
    return list(items), ""
