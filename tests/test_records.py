"""serq/_records.py: each class of the surface AST behaves as the same class made by
dataclass(frozen=True): its fields, signature, repr, equality, hash, doc, match args, frozenness,
replace and pickling."""
from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from serq import _records
from serq.diagnostics import Span
from serq.lang import ast as A

CLASSES = [c for c in vars(A).values() if isinstance(c, type) and c.__module__ == A.__name__
           and dataclasses.is_dataclass(c)]
SPAN = Span("f.sq", 1, 2, 3, 4)


def standard(cls):
    """The class made again from its annotations and defaults, by dataclass(frozen=True)."""
    ns = {"__annotations__": dict(cls.__annotations__), "__module__": cls.__module__,
          "__qualname__": cls.__qualname__, "__doc__": cls.__doc__ if cls.__doc__ != _doc(cls) else None}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            ns[f.name] = f.default
    return dataclasses.dataclass(frozen=True)(type(cls.__name__, (), ns))


def _doc(cls):
    return dataclasses.dataclass(frozen=True)(type(cls.__name__, (), {
        "__annotations__": dict(cls.__annotations__), "__module__": cls.__module__,
        **{f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}})).__doc__


def values(cls, salt):
    """Arguments for every field: distinct per field and per salt, hashable."""
    return {f.name: (SPAN if f.name == "span" else (f.name, salt)) for f in dataclasses.fields(cls)}


def test_the_ast_has_its_classes():
    assert len(CLASSES) == 66


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_each_class_is_the_frozen_dataclass(cls):
    std = standard(cls)
    assert [(f.name, f.type, f.default) for f in dataclasses.fields(cls)] == \
           [(f.name, f.type, f.default) for f in dataclasses.fields(std)]
    assert str(inspect.signature(cls)) == str(inspect.signature(std))
    assert cls.__doc__ == std.__doc__
    assert cls.__match_args__ == std.__match_args__
    assert cls.__dataclass_params__.frozen and cls.__dataclass_params__.eq
    kw = values(cls, 1)
    a, b, other = cls(**kw), std(**kw), cls(**values(cls, 2))
    assert repr(a) == repr(b)
    assert hash(a) == hash(b)
    assert a == cls(**kw) and not (a != cls(**kw))
    assert (a == other) == all(n == "span" for n in kw)  # salted fields differ, the span does not
    assert a != b  # another class, though it has the same fields
    assert cls(*kw.values()) == a
    for name in kw:
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot assign to field '{name}'"):
            setattr(a, name, 0)
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot delete field '{name}'"):
            delattr(a, name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.other = 1
    if kw:
        name = next(iter(kw))
        assert dataclasses.replace(a, **{name: "x"}) == cls(**{**kw, name: "x"})
    assert pickle.loads(pickle.dumps(a)) == a
    assert dataclasses.asdict(a) == dataclasses.asdict(b)


def test_defaults_and_missing_arguments():
    assert A.Program(items=(), span=SPAN).file == "<input>"
    with pytest.raises(TypeError):
        A.Num(1.0)


def test_a_field_records_cannot_write_is_refused():
    rec = _records.Records()

    class Bad:
        xs: list = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="plain field"):
        rec(Bad)
        rec.finish()


def test_the_compiled_methods_come_from_the_cache_and_from_source_alike(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    made = []
    for _ in range(2):  # the first compiles and writes the cache, the second reads it
        rec = _records.Records()

        @rec
        class P:
            x: int
            y: str = "a"

        rec.finish()
        made.append(P)
    assert list((tmp_path / "serq").glob("records-*.pickle"))
    for P in made:
        assert repr(P(1)) == "test_the_compiled_methods_come_from_the_cache_and_from_source_alike.<locals>.P(x=1, y='a')"
        assert P(1) == P(1, "a") and hash(P(1)) == hash((1, "a"))
