"""The ``--comment gpuplan:...`` grammar: ONE language, shared with ``job_submit.lua``.

Why one grammar matters: the hook decides at submit time whether a job is held for the engine,
and the controller later turns the same comment into a ``JobSpec``. When the two disagreed (Lua's
``tonumber`` read hex, its key pattern took digits) a comment could be held by the hook, refused
by the controller and released to Slurm's own scheduler: a queue bypass. This module and the
hook's ``parse_comment`` implement exactly the grammar below, check for check and message for
message; ``tests/slurm/test_comment_grammar.py`` runs a corpus through both (under every Lua
the hook may meet) and requires the same verdict and the same values. Change both or neither.

Grammar (``docs/slurm.md`` has the same text for users)::

    comment  = untagged | tagged
    untagged = any text that does not start with "gpuplan"   ; not ours: no options
    tagged   = "gpuplan" [ ":" [ field *( sep field ) ] ]    ; <= 1024 characters, each one
                                                             ; printable ASCII "!".."~" (no
                                                             ; space, no control, no non-ASCII)
    sep      = "," | ";"
    field    = key [ "=" value ]                             ; no empty field
    key      = letter *31( letter | digit | "_" )            ; one of KEYS, at most once
    value    = 1*( any allowed character but sep )           ; then checked by its key's type

    count    = 1*6 digit                 ; >= 1                         (min, max)
    decimal  = 1*digit [ "." 1*digit ] [ ("e" | "E") [ "+" | "-" ] 1*3 digit ]
                                         ; <= 32 characters, in (0, bound]  (work, duration, rate)
    flag     = absent | "0" | "1"        ; bare key means 1             (ranks)
    name     = 1*64( letter | digit | "_" | "." | "-" )                 (model, run)
    encoded  = 1*768( letter | digit | "%" | "_" | "." | "~" | "-" )    (id: percent-encoded)

No hex (``0x10``), no hex floats (``0x1p4``), no ``inf``/``nan``, no sign on a count, no leading
``+`` on a decimal: every number is plain decimal, so every language reads the same value.
Site policy (the partition's size, ``run=`` only for operators, ``min <= request <= max``) is
checked after the grammar by the hook and again by the controller.
"""

from __future__ import annotations

import math
import re

TAG = "gpuplan"
"""A comment starting with this belongs to gpuplan and must follow the grammar."""
MAX_COMMENT = 1024
MAX_KEY = 32
MAX_DECIMAL = 32
MAX_COUNT_DIGITS = 6
MAX_NAME = 64
MAX_ENCODED = 768
MAX_WORK = 1e15
"""Largest ``work=`` (iterations)."""
MAX_DURATION_S = 315360000.0
"""Largest ``duration=`` (ten years of 365 days)."""
MAX_RATE = 1e9
"""Largest ``rate=`` (iterations per second per GPU)."""

KEYS: dict[str, tuple[str, float]] = {
    "min": ("count", 0.0),
    "max": ("count", 0.0),
    "work": ("decimal", MAX_WORK),
    "duration": ("decimal", MAX_DURATION_S),
    "rate": ("decimal", MAX_RATE),
    "ranks": ("flag", 0.0),
    "model": ("name", 0.0),
    "run": ("name", 0.0),
    "id": ("encoded", 0.0),
}
"""key -> (type, upper bound for decimals)."""

_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_COUNT = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]{1,3})?")
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_ENCODED = re.compile(r"[A-Za-z0-9%_.~-]+")

Value = int | float | str


class CommentError(ValueError):
    """A tagged comment outside the grammar; the message is the hook's, word for word."""


def is_tagged(comment: str | None) -> bool:
    """True when the comment claims to be gpuplan's (and so must follow the grammar)."""
    return comment is not None and comment.startswith(TAG)


def _show(text: str) -> str:
    return text[:20]


def _value(key: str, kind: str, bound: float, text: str | None) -> Value:
    if text is None:
        if kind == "flag":
            return 1
        raise CommentError(f"{key} needs a value ({key}=...)")
    if text == "":
        raise CommentError(f"{key}= has an empty value")
    if kind == "count":
        if len(text) > MAX_COUNT_DIGITS or not _COUNT.fullmatch(text) or int(text) < 1:
            raise CommentError(f"{key}={_show(text)} must be a whole number in [1, 999999]")
        return int(text)
    if kind == "decimal":
        value = float(text) if len(text) <= MAX_DECIMAL and _DECIMAL.fullmatch(text) else math.nan
        if not (math.isfinite(value) and 0 < value <= bound):
            raise CommentError(f"{key}={_show(text)} must be a decimal number in (0, {bound:g}]")
        return value
    if kind == "flag":
        if text not in ("0", "1"):
            raise CommentError(f"{key}={_show(text)} must be 0 or 1")
        return int(text)
    if kind == "name":
        if len(text) > MAX_NAME or not _NAME.fullmatch(text):
            raise CommentError(f"{key}={_show(text)} must be 1 to {MAX_NAME} of A-Z a-z 0-9 _ . -")
        return text
    if len(text) > MAX_ENCODED or not _ENCODED.fullmatch(text):
        raise CommentError(
            f"{key}={_show(text)} must be 1 to {MAX_ENCODED} of A-Z a-z 0-9 % _ . ~ -"
        )
    return text


def parse_comment(comment: str | None) -> dict[str, Value]:
    """The fields of a gpuplan comment (``{}`` for an untagged one); CommentError when a tagged
    comment is outside the grammar. Checks run in the hook's order, so the first problem found
    (and its message) is the same in both."""
    if comment is None or not is_tagged(comment):
        return {}
    # Characters first: once they are ASCII, Lua's byte length and Python's character length
    # are the same number.
    if any(not "!" <= ch <= "~" for ch in comment):
        raise CommentError("comment must be printable ASCII without spaces")
    if len(comment) > MAX_COMMENT:
        raise CommentError(f"comment is longer than {MAX_COMMENT} characters")
    rest = comment[len(TAG) :]
    if rest == "":
        return {}
    if rest[0] != ":":
        raise CommentError(f"comment must be '{TAG}' or '{TAG}:FIELDS'")
    body = rest[1:]
    fields: dict[str, Value] = {}
    if body == "":
        return fields
    for item in re.split(r"[,;]", body):
        if item == "":
            raise CommentError("empty field (two separators in a row, or one at an end)")
        key, eq, text = item.partition("=")
        if len(key) > MAX_KEY or not _KEY.fullmatch(key):
            raise CommentError(
                f"key '{_show(key)}' must be a letter followed by letters, digits or _"
            )
        if key not in KEYS:
            raise CommentError(f"unknown key '{key}'")
        if key in fields:
            raise CommentError(f"duplicate key '{key}'")
        kind, bound = KEYS[key]
        fields[key] = _value(key, kind, bound, text if eq else None)
    return fields
