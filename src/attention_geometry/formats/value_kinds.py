"""The value kinds of the config readers (CORPUS.yaml: data.config, RUN.yaml: training.config, the
hyperparameter overrides: training.models), checked by one function, so the three readers accept the same
values and name them the same way. config/schema.yaml states the same kinds as JSON-schema types
(`SCHEMA_TYPES`; tests/test_schema.py compares them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["VALUE_KINDS", "SCHEMA_TYPES", "expected"]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# kind -> (what it is, in words; the test)
VALUE_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "str": ("a string", lambda v: isinstance(v, str)),
    "nonempty_str": ("a non-empty string", lambda v: isinstance(v, str) and v != ""),
    "int": ("an integer", _is_int),
    "number": ("a number", _is_number),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "int_list": ("a list of integers", lambda v: isinstance(v, list) and all(_is_int(x) for x in v)),
    "number_pair": ("two numbers", lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and all(map(_is_number, v))),
    "dict": ("a mapping", lambda v: isinstance(v, dict)),
    "any": ("anything", lambda v: True),
}

# kind -> the JSON-schema `type` of config/schema.yaml (None: no type stated)
SCHEMA_TYPES: dict[str, Any] = {
    "str": "string",
    "nonempty_str": "string",
    "int": "integer",
    "number": "number",
    "bool": "boolean",
    "int_list": "array",
    "number_pair": "array",
    "dict": "object",
    "any": None,
}


def expected(value: Any, kind: str) -> str | None:
    """None when `value` is of `kind` (prefix `opt_`: or null), else what was expected, in words."""
    optional = kind.startswith("opt_")
    if optional and value is None:
        return None
    what, ok = VALUE_KINDS[kind.removeprefix("opt_")]
    if ok(value):
        return None
    return f"null or {what}" if optional else what
