"""Strict dataclass configs: build them from plain dicts (YAML, JSON, overrides) and turn them back into dicts.

``from_dict(cls, data, source)`` checks every key against the dataclass fields (recursively, through ``Optional``,
``Literal``, ``enum.Enum`` (the value as written, made a member), ``list``/``dict`` and nested dataclasses): an
unknown or misspelt key, a missing required one or a value of the wrong type is a
:class:`~reelsearch.errors.ConfigError` naming the key path and where the config came from
(``configs/scde.yaml: train.lr_rate: unknown key; known: ...``). ``to_dict`` writes an enum member as its value.

``apply_overrides(data, ["train.lr=1e-4", ...])`` sets dotted paths in a config dict (values parsed as YAML
scalars), the generic ``--set`` of the command line; :func:`apply_section` does the same for a config that is one
section of keys (``tune.epochs=5``: ``reelsearch.config.tuning``).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import enum
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

import yaml

from reelsearch.errors import ConfigError


def _where(source: str | None, path: str) -> str:
    place = path or "(top level)"
    return f"{source}: {place}" if source else place


def _type_name(tp) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " | ".join(repr(m.value) for m in tp)
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    if origin in (list, tuple):
        return "a list"
    if origin is dict:
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _convert(tp, value, path: str, source: str | None):
    """``value`` checked (and built, for dataclasses) as type ``tp``."""
    origin = get_origin(tp)
    if tp is Any:
        return copy.deepcopy(value)
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise ConfigError(f"{_where(source, path)}: must not be null (expected {_type_name(tp)})")
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, path, source)
            except ConfigError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        raise ConfigError(f"{_where(source, path)}: {value!r} is not {_type_name(tp)}")
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(f"{_where(source, path)}: {value!r} is not one of {', '.join(map(repr, get_args(tp)))}")
        return value
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            values = ", ".join(repr(m.value) for m in tp)
            raise ConfigError(f"{_where(source, path)}: {value!r} is not one of {values}") from None
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        return from_dict(tp, value, source, path)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{_where(source, path)}: expected a list, got {value!r}")
        (item,) = get_args(tp) or (Any,)
        return [_convert(item, v, f"{path}[{i}]", source) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{_where(source, path)}: expected a mapping, got {value!r}")
        key_t, val_t = get_args(tp) or (str, Any)
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ConfigError(f"{_where(source, path)}: keys must be strings, got {k!r}")
            out[k] = _convert(val_t, v, f"{path}.{k}" if path else k, source)
        return out
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{_where(source, path)}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{_where(source, path)}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{_where(source, path)}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{_where(source, path)}: expected text, got {value!r}")
        return value
    raise TypeError(f"unsupported config type {tp!r} at {path}")


def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def from_dict(cls, data, source: str | None = None, path: str = ""):
    """An instance of the dataclass ``cls`` from the mapping ``data``; ConfigError names any bad key path."""
    if not isinstance(data, dict):
        raise ConfigError(f"{_where(source, path)}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        near = difflib.get_close_matches(str(key), fields, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else f"; known: {', '.join(fields)}"
        raise ConfigError(f"{_where(source, f'{path}.{key}' if path else str(key))}: unknown key{hint}")
    hints = _hints(cls)
    kwargs = {}
    for name, f in fields.items():
        sub = f"{path}.{name}" if path else name
        if name in data:
            kwargs[name] = _convert(hints[name], data[name], sub, source)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{_where(source, sub)}: missing (required)")
    try:
        obj = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{_where(source, path)}: {exc}") from exc
    check = getattr(obj, "check", None)
    if check is not None:
        try:
            check()
        except ConfigError as exc:
            raise ConfigError(f"{_where(source, path)}: {exc}") from exc
    return obj


def to_dict(obj, drop_defaults: bool = False) -> Any:
    """Plain dicts/lists of a config dataclass (field order kept), ready for YAML or JSON; ``drop_defaults`` leaves
    out fields equal to their default (a compact form that reads back to the same config). A field whose metadata
    says ``omit_default`` is always left out at its default (a field added later keeps earlier files as they were)."""
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if (drop_defaults or f.metadata.get("omit_default")) and f.default is not dataclasses.MISSING \
                    and value == f.default:
                continue
            out[f.name] = to_dict(value, drop_defaults)
        return out
    if isinstance(obj, dict):
        return {k: to_dict(v, drop_defaults) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v, drop_defaults) for v in obj]
    if isinstance(obj, enum.Enum):
        return obj.value
    return obj


def parse_value(text: str):
    """A ``--set`` value: YAML scalars and flow collections (``1e-4``, ``null``, ``true``, ``[a, b]``), else text."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and _looks_like_float(value):
        return float(value)  # YAML 1.1 reads "1e-4" as text
    return value


def _looks_like_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.strip().lower() not in ("nan", "inf", "-inf", "+inf", "infinity", "-infinity")


def parse_override(item: str) -> tuple[str, Any]:
    """``"train.lr=1e-4"`` -> ("train.lr", 0.0001)."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
        raise ConfigError(f"--set {item!r}: expected KEY.PATH=VALUE, e.g. train.lr=1e-4")
    return key.strip(), parse_value(value.strip())


def override_items(overrides: dict[str, Any] | list[str] | None) -> list[tuple[str, Any]]:
    """(dotted path, value) pairs of ``{"train.lr": 1e-4}`` or ``["train.lr=1e-4", ...]`` (values parsed as YAML)."""
    if not overrides:
        return []
    return [parse_override(o) for o in overrides] if isinstance(overrides, list) else list(overrides.items())


def apply_section(config, overrides: dict[str, Any] | list[str] | None, source: str = "--set"):
    """The config dataclass ``config``, whose keys are set as ``<its section>.<key>`` (``tune.epochs=5``: the class's
    ``section``), with ``overrides`` applied and checked again, with the errors of a model config's ``--set``."""
    section = type(config).section
    data = {section: to_dict(config)}
    for path, value in override_items(overrides):
        if path.split(".", 1)[0] != section:
            raise ConfigError(f"{_where(source, path)}: unknown key; the keys here are {section}.*")
        set_path(data, path, value, source)
    return from_dict(type(config), data[section], source, section)


def set_path(data: dict, path: str, value, source: str = "--set") -> None:
    """Set the dotted ``path`` in the nested dict ``data`` (creating mappings under a null or missing section)."""
    parts = path.split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        nxt = node.get(part) if isinstance(node, dict) else None
        if nxt is None:
            nxt = node[part] = {}
        elif not isinstance(nxt, dict):
            raise ConfigError(f"{source}: {'.'.join(parts[:i + 1])} is {nxt!r}, not a section; cannot set {path}")
        node = nxt
    node[parts[-1]] = copy.deepcopy(value)


def merge_dicts(base: dict, overrides: dict) -> dict:
    """``base`` with ``overrides`` merged in recursively (a copy; dicts merge, anything else replaces)."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_dicts(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
