"""A cheaper ``model_construct`` for the pydantic models the engine builds on every event.

``BaseModel.model_construct`` walks every field of the class on every call (aliases, validation
aliases, ``is_required``, ``get_default``), which made it the largest single cost of a FIFO
simulation (70k calls for 10k jobs, about a quarter of the run). What it produces depends only
on the class and on which fields are given, so :func:`construct` works it out once per class
(:class:`_Shape`) and then builds an instance with one dict copy, one update and four slot
writes. The instance is the one ``model_construct`` would build from the same values: the same
``__dict__`` (same keys, same order: declaration order), the same ``model_fields_set`` (the
names given), ``__pydantic_extra__`` and ``__pydantic_private__`` None; defaults are the same
objects ``model_construct`` would use (immutable defaults shared, other defaults and
``default_factory`` called per instance). ``tests/models/test_models_fast.py`` checks this
per class.

Two deliberate differences, both on inputs no caller of the fast path gives: an unknown field
name or a missing required field raises ``TypeError`` (``model_construct`` silently drops the
first and leaves the second unset, an instance that fails later). Classes for which the
precomputation would not be exact — aliases, ``extra="allow"``, a ``model_post_init`` or
private attributes, root models, a factory that reads the validated data — go through
``model_construct`` unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic._internal._utils import smart_deepcopy
from pydantic_core import PydanticUndefined

M = TypeVar("M", bound=BaseModel)

_MISSING: Any = object()
"""Template value of a required field (replaced by every valid call)."""
_IMMUTABLE = (int, float, str, bool, bytes, type(None))
"""Default types ``smart_deepcopy`` hands back as they are (so one object serves every
instance); any other default is copied per instance, as ``model_construct`` does."""
_setattr = object.__setattr__
_new = object.__new__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
"""The slot descriptors ``model_construct`` writes through ``object.__setattr__``, called
directly (one lookup less per write)."""


class _Shape:
    """What ``model_construct`` would do for one class, worked out once."""

    __slots__ = ("computed", "names", "required", "size", "template")

    def __init__(self, cls: type[BaseModel]) -> None:
        template: dict[str, Any] = {}
        required: list[str] = []
        computed: list[tuple[str, Callable[[], Any]]] = []
        for name, field in cls.__pydantic_fields__.items():
            if field.default_factory is not None:
                template[name] = _MISSING
                computed.append((name, field.default_factory))  # type: ignore[arg-type]
            elif field.default is PydanticUndefined:
                template[name] = _MISSING
                required.append(name)
            elif type(field.default) in _IMMUTABLE:
                template[name] = field.default  # smart_deepcopy returns these as they are
            else:
                template[name] = _MISSING
                default = field.default
                computed.append((name, lambda d=default: smart_deepcopy(d)))
        self.template = template
        self.size = len(template)
        self.required = frozenset(required)
        self.computed = tuple(computed)
        """Fields whose default is made per instance (factories, mutable defaults)."""
        self.names = frozenset(template)


def _exact(cls: type[BaseModel]) -> bool:
    """Whether :class:`_Shape` reproduces ``model_construct`` for ``cls`` exactly."""
    if cls.__pydantic_root_model__ or cls.__pydantic_post_init__ or cls.__private_attributes__:
        return False
    if cls.model_config.get("extra") == "allow":
        return False
    for field in cls.__pydantic_fields__.values():
        if field.alias is not None or field.validation_alias is not None:
            return False
        if field.default_factory_takes_validated_data:
            return False
    return True


_SHAPES: dict[type[BaseModel], _Shape | None] = {}


def _shape_of(cls: type[BaseModel]) -> _Shape | None:
    shape = _Shape(cls) if _exact(cls) else None
    _SHAPES[cls] = shape
    return shape


def construct(cls: type[M], /, **values: Any) -> M:
    """``cls.model_construct(**values)`` (trusted values, no validation), computed faster.

    Raises ``TypeError`` for a field ``cls`` does not have or a required field not given."""
    try:
        shape = _SHAPES[cls]
    except KeyError:
        shape = _shape_of(cls)
    if shape is None:
        return cls.model_construct(**values)
    fields = {**shape.template, **values}  # declaration order, then any unknown name
    if len(fields) != shape.size:
        unknown = sorted(set(values) - shape.names)
        raise TypeError(f"{cls.__name__}: unknown field(s) {unknown}")
    if not shape.required.issubset(values):
        missing = sorted(shape.required - values.keys())
        raise TypeError(f"{cls.__name__}: missing required field(s) {missing}")
    if shape.computed:
        for name, make in shape.computed:
            if name not in values:
                fields[name] = make()
    m = _new(cls)
    _setattr(m, "__dict__", fields)
    _set_fields_set(m, set(values))
    _set_extra(m, None)
    _set_private(m, None)
    return m
