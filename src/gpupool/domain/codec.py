"""Frozen dataclasses and enums <-> JSON-able values, for a record both worlds read (the loop's journal).

One generic codec rather than a ``to_dict`` per type: a dataclass is ``{"_t": name, field: value, ...}``
(only fields passed to its constructor), as is a named tuple; an enum is ``{"_e": name, "v": value}``, a
tuple (or any other sequence, decoded as a tuple) a list, a frozenset ``{"_s": [...]}``, a mapping
``{"_m": [[key, value], ...]}`` (keys need not be strings). Floats stay floats, NaN and infinities
included (``json`` writes them as ``NaN``/``Infinity`` and reads them back). Decoding
builds only the classes the ``Codec`` was given, by name, so a file cannot make it call anything else;
whatever does not fit raises ``ValueError`` saying where. ``reachable(roots)`` gives the roots and every
dataclass, named tuple and enum their fields' types name, so a type a new field brings in is known at once.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from types import MappingProxyType
from typing import Any

from gpupool.domain.errors import GpupoolError


class Codec:
    def __init__(self, types: Iterable[type]) -> None:
        self._types: dict[str, type] = {}
        for t in types:
            if not (dataclasses.is_dataclass(t) or issubclass(t, Enum) or _named_tuple(t)):
                raise TypeError(f"{t.__name__} is neither a dataclass, a named tuple nor an enum")
            if self._types.setdefault(t.__name__, t) is not t:
                raise TypeError(f"two types named {t.__name__}")

    def encode(self, value: Any) -> Any:
        if value is None or (isinstance(value, bool | int | float | str) and not isinstance(value, Enum)):
            return value
        if isinstance(value, Enum):
            self._known(type(value))
            return {"_e": type(value).__name__, "v": value.value}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            self._known(type(value))
            out: dict[str, Any] = {"_t": type(value).__name__}
            for f in dataclasses.fields(value):
                if f.init:
                    out[f.name] = self.encode(getattr(value, f.name))
            return out
        if _named_tuple(type(value)):
            self._known(type(value))
            return {"_t": type(value).__name__, **{k: self.encode(v) for k, v in value._asdict().items()}}
        if isinstance(value, Sequence):  # a tuple, a list, or a sequence class (decoded as a tuple)
            return [self.encode(v) for v in value]
        if isinstance(value, frozenset | set):
            return {"_s": sorted((self.encode(v) for v in value), key=repr)}
        if isinstance(value, Mapping):
            return {"_m": [[self.encode(k), self.encode(v)] for k, v in value.items()]}
        raise TypeError(f"cannot encode a {type(value).__name__}")

    def decode(self, data: Any, where: str = "value") -> Any:
        if data is None or isinstance(data, bool | int | float | str):
            return data
        if isinstance(data, list):
            return tuple(self.decode(v, f"{where}[{i}]") for i, v in enumerate(data))
        if not isinstance(data, dict):
            raise ValueError(f"{where}: cannot decode a {type(data).__name__}")
        if "_e" in data:
            cls = self._type(data["_e"], where)
            try:
                return cls(data.get("v"))
            except ValueError:
                raise ValueError(f"{where}: {data.get('v')!r} is not a {cls.__name__}") from None
        if "_s" in data:
            return frozenset(self.decode(data["_s"], where))
        if "_m" in data:
            pairs = data["_m"]
            if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
                raise ValueError(f"{where}: a mapping is a list of [key, value] pairs")
            return MappingProxyType({self.decode(k, where): self.decode(v, f"{where}[{k!r}]") for k, v in pairs})
        if "_t" in data:
            cls = self._type(data["_t"], where)
            kwargs = {k: self.decode(v, f"{where}.{k}") for k, v in data.items() if k != "_t"}
            try:
                return cls(**kwargs)
            except (TypeError, ValueError, GpupoolError) as e:
                raise ValueError(f"{where}: not a valid {cls.__name__}: {e}") from None
        raise ValueError(f"{where}: an object without a type tag")

    def _known(self, cls: type) -> None:
        if self._types.get(cls.__name__) is not cls:
            raise TypeError(f"{cls.__name__} is not a type of this codec")

    def _type(self, name: Any, where: str) -> Any:
        cls = self._types.get(name) if isinstance(name, str) else None
        if cls is None:
            raise ValueError(f"{where}: unknown type {name!r}")
        return cls


def _named_tuple(t: type) -> bool:
    return issubclass(t, tuple) and hasattr(t, "_fields") and hasattr(t, "_asdict")


def reachable(roots: Iterable[Any]) -> list[type]:
    """``roots`` (classes, or unions of them) and every dataclass, named tuple and enum named by their fields'
    types (and by the generic bases of other classes there, such as a ``Sequence[X]``), recursively: the
    types a codec for the roots needs."""
    out: dict[type, None] = {}
    todo = list(roots)
    while todo:
        t = todo.pop()
        args = typing.get_args(t)
        if args:  # a union, a tuple[...], a Mapping[...], an Optional
            todo.extend(args)
            continue
        if not isinstance(t, type) or t in out:
            continue
        if dataclasses.is_dataclass(t) or _named_tuple(t):
            out[t] = None
            todo.extend(typing.get_type_hints(t).values())
        elif issubclass(t, Enum):
            out[t] = None
        else:  # a class of its own, such as a Sequence[X]: what its generic bases name
            todo.extend(getattr(t, "__orig_bases__", ()))
    return list(out)
