"""The value kinds of the config readers (CORPUS.yaml: data.config, RUN.yaml: training.config, the
hyperparameter overrides: training.models), checked by one function, so the three readers accept the same
values and name them the same way. config/schema.yaml states the same kinds as JSON-schema types
(`SCHEMA_TYPES`; tests/test_schema.py compares them). The corpus and image-set readers (data.corpus_config,
data.image_config) also share the checks of a mapping's keys, of a config's top level with its dataset, of a
choice and of the minimums here."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "short_repr",
    "closest_hint",
    "unknown_key",
    "VALUE_KINDS",
    "SCHEMA_TYPES",
    "expected",
    "checked_keys",
    "checked_top",
    "check_choice",
    "check_minimums",
]


def closest_hint(key: Any, known, prefix: str = "") -> str:
    """``did you mean `PREFIXCLOSEST`?``, or the known names listed where none is close (difflib, cutoff 0.6)."""
    names = sorted(str(k) for k in known)
    close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
    return f"did you mean `{prefix}{close[0]}`?" if close else f"known: {', '.join(names)}"


def unknown_key(key: Any, known, prefix: str = "") -> str:
    """``unknown key `PREFIXKEY` (did you mean `PREFIXCLOSEST`?)``, or with the known keys listed where none is close:
    the one wording of a config typo at any depth (the workflow's schema check, RUN.yaml, show-run, the corpus and
    image configs); `prefix`: the dotted path of the mapping the key is in (`tokenizer.`)."""
    return f"unknown key `{prefix}{key}` ({closest_hint(key, known, prefix)})"


def short_repr(value: Any, limit: int = 80) -> str:
    """repr(value) cut to about `limit` characters, each container shown by its first few items (reprlib): a
    message never formats an unbounded value (a YAML alias bomb's repr is gigabytes: issue 59.4)."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxdict, r.maxlist, r.maxtuple, r.maxset = 3, 4, 4, 4, 4
    r.maxstring = r.maxother = limit
    text = r.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


def checked_keys(
    raw: Any, cls: type, kinds: Mapping[str, str], prefix: str, where: str, what: str, error: type[Exception]
) -> dict[str, Any]:
    """The keys of one config mapping (`raw`; None: empty) that `kinds` names, with their values: `error` where
    `raw` is not a mapping (named `prefix` without its dot, or `what` at the top), where a key is not a field of
    dataclass `cls` (all keys are checked before any value), or a value is not of its kind. A key of `cls`
    that `kinds` does not name (a sub-mapping) is left to its own call."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise error(f"{where}: `{prefix.rstrip('.') or what}` must be a mapping, got {raw!r}")
    known = {f.name for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in known:
            raise error(f"{where}: {unknown_key(key, known, prefix)}")
    out = {}
    for key, value in raw.items():
        if key in kinds:
            problem = expected(value, kinds[key])
            if problem is not None:
                raise error(f"{where}: `{prefix}{key}` must be {problem}, got {short_repr(value)}")
            out[key] = value
    return out


def checked_top(
    raw: Any,
    cls: type,
    kinds: Mapping[str, str],
    datasets: tuple[str, ...],
    where: str,
    what: str,
    error: type[Exception],
) -> tuple[dict[str, Any], str]:
    """The top level of a config (`what`, dataclass `cls`): its keys and values as checked_keys checks them, and its
    `dataset` (default cls.dataset), which must be one of `datasets`."""
    top = checked_keys(raw, cls, kinds, "", where, what, error)
    dataset = top.get("dataset", cls.dataset)
    check_choice(dataset, "dataset", datasets, where, error)
    return top, dataset


def check_choice(value: Any, key: str, choices: tuple[str, ...], where: str, error: type[Exception]) -> None:
    """`error` where `value`, of config key `key`, is not one of `choices` (naming them)."""
    if value not in choices:
        raise error(f"{where}: unknown `{key}` {short_repr(value)} (one of {', '.join(choices)})")


def check_minimums(
    values: Mapping[str, Any],
    minimums: Mapping[str, int | float],
    exclusive_maximums: Mapping[str, int | float],
    optional: tuple[str, ...],
    where: str,
    error: type[Exception],
) -> None:
    """`error` naming the first key of `minimums` whose value (null: not checked) is below its inclusive minimum
    or, where `exclusive_maximums` gives one, not below that; `optional` keys may also be null, which the
    message says."""
    for key, minimum in minimums.items():
        v = values.get(key)
        if v is None:
            continue
        high = exclusive_maximums.get(key)
        if high is not None and not minimum <= v < high:
            raise error(f"{where}: `{key}` must be in [{minimum}, {high:g}), got {v}")
        if v < minimum:
            null = " or null" if key in optional else ""
            raise error(f"{where}: `{key}` must be >= {minimum}{null}, got {v}")
