"""Frozen dataclasses whose methods are compiled together, once per module.

`dataclass(frozen=True)` compiles each generated method on its own (six `exec`s a class), which
made the 66 classes of the surface AST a sixth of `serq check`'s CPU time (bench/startup.py;
importing serq.lang.ast took 110 ms, now 22). A module declares its classes with an instance,
`record = Records()`, as `@record`, and calls `record.finish()` after the last one: the
fields are still found by `dataclasses` (so `fields`, `replace`, `is_dataclass` and `asdict` work
as before), and `__init__`, `__repr__`, `__eq__`, `__hash__`, `__setattr__` and `__delattr__` are
written as `dataclass(frozen=True)` writes them (CPython 3.11's dataclasses.py), for every class
of the module in one compile, whose code the per-user cache keeps (serq/_cache.py: keyed by the
source it compiles and Python's version, so never stale). tests/test_records.py compares each class
with the dataclass built the standard way."""
from __future__ import annotations

import dataclasses
import marshal
import sys

# what dataclass(frozen=True) records on a class, taken from the library itself
_FROZEN_PARAMS = getattr(dataclasses.dataclass(frozen=True)(type("_P", (), {})), "__dataclass_params__")


class Records:
    """A decorator that collects a module's classes, and `finish` that gives them their methods."""

    def __init__(self):
        self._pending: list[tuple[type, bool]] = []

    def __call__(self, cls: type) -> type:
        undocumented = cls.__doc__ is None
        if undocumented:  # else dataclass writes it from inspect.signature, a tenth of its time
            cls.__doc__ = "-"
        cls = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
        self._pending.append((cls, undocumented))
        return cls

    def finish(self) -> None:
        classes, self._pending = self._pending, []
        lines: list[str] = []
        env: dict = {"_set": object.__setattr__, "_Frozen": dataclasses.FrozenInstanceError,
                     "_NotImplemented": NotImplemented}
        for i, (cls, _) in enumerate(classes):
            _source(i, cls, lines, env)
        exec(_compiled("\n".join(lines), f"<records {classes[0][0].__module__ if classes else ''}>"), env)
        for i, (cls, undocumented) in enumerate(classes):
            for name, fn in env[f"_make{i}"](cls).items():
                fn.__qualname__ = f"{cls.__qualname__}.{name}"
                setattr(cls, name, fn)
            cls.__init__.__annotations__ = {f.name: f.type for f in dataclasses.fields(cls)} | {"return": None}
            setattr(cls, "__dataclass_params__", _FROZEN_PARAMS)
            if undocumented:  # as dataclass: the class's signature (as inspect writes it)
                cls.__doc__ = cls.__name__ + "(" + ", ".join(map(_shown, dataclasses.fields(cls))) + ")"


def _shown(f) -> str:
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return f"{f.name}: {t!r}" + ("" if f.default is dataclasses.MISSING else f" = {f.default!r}")


def _compiled(source: str, name: str):
    """The code of `source`, from the per-user cache when it is there."""
    from serq import _cache
    path = _cache.path("records", name, source, sys.version)
    code = _cache.read(path, marshal.load)
    if code is not None:
        return code
    code = compile(source, name, "exec")
    if path is not None:
        _cache.save(path, lambda fh: marshal.dump(code, fh))
    return code


def _source(i: int, cls: type, out: list[str], env: dict) -> None:
    fields = dataclasses.fields(cls)
    for f in fields:
        if (f.default_factory is not dataclasses.MISSING or not f.init or not f.repr or not f.compare
                or f.hash is not None or f.kw_only):
            raise TypeError(f"{cls.__qualname__}.{f.name}: a record field is a plain field, "
                            "with at most a default value")
    params = []
    for f in fields:
        if f.default is dataclasses.MISSING:
            params.append(f.name)
        else:
            env[f"_d{i}_{f.name}"] = f.default
            params.append(f"{f.name}=_d{i}_{f.name}")
    names = tuple(f.name for f in fields)
    mine = "".join(f"self.{n}," for n in names)
    theirs = "".join(f"other.{n}," for n in names)
    shown = ", ".join(f"{n}={{self.{n}!r}}" for n in names)
    out.append(f"def _make{i}(cls):")
    out.append(f"  def __init__(self, {', '.join(params)}):")
    out.extend(f"    _set(self, {n!r}, {n})" for n in names)
    if not names:
        out.append("    pass")
    out.append("  def __repr__(self):")
    out.append(f"    return self.__class__.__qualname__ + f\"({shown})\"")
    out.append("  def __eq__(self, other):")
    out.append("    if other.__class__ is self.__class__:")
    out.append(f"      return ({mine})==({theirs})")
    out.append("    return _NotImplemented")
    out.append("  def __hash__(self):")
    out.append(f"    return hash(({mine}))")
    out.append("  def __setattr__(self, name, value):")
    out.append(f"    if type(self) is cls or name in {names!r}:")
    out.append("      raise _Frozen(f\"cannot assign to field {name!r}\")")
    out.append("    super(cls, self).__setattr__(name, value)")
    out.append("  def __delattr__(self, name):")
    out.append(f"    if type(self) is cls or name in {names!r}:")
    out.append("      raise _Frozen(f\"cannot delete field {name!r}\")")
    out.append("    super(cls, self).__delattr__(name)")
    out.append("  return {'__init__': __init__, '__repr__': __repr__, '__eq__': __eq__, "
               "'__hash__': __hash__, '__setattr__': __setattr__, '__delattr__': __delattr__}")
