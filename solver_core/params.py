"""Policy parameters: declared per policy and wrapper, set from scenario files or the CLI.

Every registered policy and wrapper declares its parameters as a small pydantic model
(:class:`Params` subclass): names, types, defaults and one line of help each, so
``gpuplan policies NAME`` can list them and a bad value is refused in one line naming it.

A *configuration* names a base policy, optional wrappers and parameter values. Configurations
come from a scenario file's ``policies:`` block or inline on the command line; both resolve to
the same :class:`PolicyConfig`::

    policies:                                  # scenario file
      tl-500: {base: tiresias-l, thresholds: [500], promote_knob: null}
      afs-l-packed-5s: {base: afs-l, wrappers: [network-packing, reuse], time_limit_s: 5}

    gpuplan compare --policies 'tiresias-l(thresholds=[500],promote_knob=null),fifo'

The inline form is ``base(key=value, ...)``; each value is read as YAML (``[500, 1000]``,
``null``, ``true``, ``5``, ``greedy``), and ``wrappers=[...]`` lists wrappers. Flat keys are
matched against the base's parameters and every wrapper's; a key that none declares is an
error, a key several declare (``time_limit_s``) sets all of them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from gpuplan.models import InputError

__all__ = [
    "NoParams",
    "Params",
    "PolicyConfig",
    "describe_params",
    "parse_inline",
    "split_policy_list",
    "validate_params",
]


class Params(BaseModel):
    """Base of every parameter model: strict, immutable, finite numbers only."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class NoParams(Params):
    """A policy or wrapper without parameters."""


class PolicyConfig(BaseModel):
    """A named configuration: base policy, wrappers in order, and flat parameter values."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    base: str
    wrappers: tuple[str, ...] = ()
    values: dict[str, Any] = {}

    @classmethod
    def from_mapping(cls, name: str, raw: object, where: str = "policies") -> PolicyConfig:
        """Read one entry of a ``policies:`` block (``{base: ..., wrappers: [...], k: v}``)."""
        if not isinstance(raw, Mapping):
            raise InputError(
                "a policy configuration must be a mapping with a 'base' key",
                field=f"{where}.{name}",
            )
        data = dict(raw)
        base = data.pop("base", None)
        if not isinstance(base, str) or not base:
            raise InputError(
                "needs 'base': the name of a registered policy", field=f"{where}.{name}.base"
            )
        wrappers = data.pop("wrappers", ())
        if isinstance(wrappers, str):
            wrappers = (wrappers,)
        if not isinstance(wrappers, (list, tuple)) or not all(isinstance(w, str) for w in wrappers):
            raise InputError("must be a list of wrapper names", field=f"{where}.{name}.wrappers")
        for key in data:
            if not isinstance(key, str):
                raise InputError(
                    f"parameter names must be text, got {key!r}", field=f"{where}.{name}"
                )
        return cls(name=name, base=base, wrappers=tuple(wrappers), values=data)


_INLINE = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*\((.*)\)\s*$", re.S)


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split ``text`` at ``sep`` outside brackets and quotes."""
    parts: list[str] = []
    depth = 0
    quote: str | None = None
    cur: list[str] = []
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                raise InputError(f"unbalanced brackets in {text!r}", field="policies")
        elif ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    if depth != 0 or quote:
        raise InputError(f"unbalanced brackets or quotes in {text!r}", field="policies")
    parts.append("".join(cur))
    return parts


def split_policy_list(text: str) -> list[str]:
    """``"fifo,tiresias-l(thresholds=[500,1000])"`` -> the two policy texts."""
    return [p.strip() for p in _split_top(text) if p.strip()]


def parse_inline(text: str) -> PolicyConfig | None:
    """``base(key=value, ...)`` as a configuration named ``text``; None for a plain name."""
    match = _INLINE.match(text)
    if match is None:
        if "(" in text or ")" in text:
            raise InputError(f"cannot read {text!r}; write base(key=value, ...)", field="policies")
        return None
    base, body = match.group(1), match.group(2)
    values: dict[str, Any] = {}
    for item in (p for p in _split_top(body) if p.strip()):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise InputError(f"{item.strip()!r} is not key=value", field=f"policies.{text}")
        try:
            values[key] = yaml.safe_load(raw.strip()) if raw.strip() else None
        except yaml.YAMLError:
            raise InputError(
                f"cannot read the value {raw.strip()!r}", field=f"policies.{text}.{key}"
            ) from None
    return PolicyConfig.from_mapping(text.strip(), {"base": base, **values}, where="policies")


def validate_params(model: type[Params], values: Mapping[str, Any], where: str) -> Params:
    """``model(**values)``, or one line naming the first bad parameter."""
    try:
        return model(**values)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "?"
        msg = first["msg"]
        if first["type"] == "extra_forbidden":
            msg = f"unknown parameter; known: {', '.join(model.model_fields) or 'none'}"
        raise InputError(msg, field=f"{where}.{loc}") from None
    except (TypeError, ValueError) as err:
        raise InputError(str(err).splitlines()[0], field=where) from None


def describe_params(model: type[Params]) -> list[tuple[str, str, str, str]]:
    """(name, type, default, help) per parameter, for ``gpuplan policies NAME``."""
    return [
        (name, _type_name(info.annotation), repr(info.default), info.description or "")
        for name, info in model.model_fields.items()
    ]


def _type_name(annotation: object) -> str:
    """``Literal['a', 'b'] | None`` -> ``a | b | null``; ``tuple[float, ...]`` -> list of
    float: the words a user writes in a scenario file."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if origin in (Union, UnionType):
        return " | ".join("null" if a is type(None) else _type_name(a) for a in args)
    if origin in (tuple, list):
        return f"list of {_type_name(args[0])}" if args else "list"
    return getattr(annotation, "__name__", str(annotation))
