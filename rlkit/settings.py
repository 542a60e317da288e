"""Settings given as text, for every config: one `KEY=VALUE` parser (`parse_sets`), one override
path (`apply_settings`), one builder from a recorded dict (`build_config`) and one coercion
(`coerce_text`), so `true`, `none` and numbers mean the same everywhere: docs/cli.md#overriding-a-config."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any

from rlkit.errors import UsageError

_BASE = "<base>"  # a `_Node` key: the whole section given as an instance

RENAMED: dict[str, str] = {
    "grpo.eps_clip_low": "recipe.eps_clip_low",
    "grpo.eps_clip_high": "recipe.eps_clip_high",
    "grpo.norm_by_std": "recipe.grpo_norm_by_std",
    "grpo.reduction": "recipe.loss_reduction",
    "grpo.max_seq_len": "recipe.max_seq_len",
    "grpo.kl_coef": "recipe.kl_loss_coef",
    "grpo.kl_estimator": "recipe.kl_estimator_type",
    "grpo.filter_zero_variance": "recipe.zero_variance_filter",
    "grpo.fail_advantage": "recipe.fail_advantage",
    "grpo.min_informative": "recipe.dynamic_sampling_type",
    "grpo.max_rounds": "recipe.max_sample_batches",
    "kl_coef": "recipe.kl_loss_coef",
}
"""Old keys -> their recipe switch: setting one is a one-line error naming the new one."""


def parse_sets(items: Iterable[str], what: str = "--set") -> dict[str, str]:
    """`KEY=VALUE` items -> {key: text} (last repeat wins, values stay text); an item without
    `=` (or a Hydra `+key`) is a one-line UsageError."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or key.startswith("+"):
            raise UsageError(
                f"{what} {item!r}: write section.field=value or key=value (e.g. grpo.lr=1e-4; "
                "no '+')"
            )
        out[key.strip()] = value.strip()
    return out


def coerce_text(value: Any, key: str, annotation: Any) -> Any:
    """Text `value` as its field's type, read from the annotation as text (`"float | None"`):
    `none`/`null` give None where it allows None; a bad value is a one-line UsageError."""
    if not isinstance(value, str):
        return value
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    if "None" in text and value.lower() in ("none", "null"):
        return None
    if text.startswith("bool"):
        if value.lower() not in ("true", "false", "1", "0"):
            raise UsageError(f"{key} takes true or false, got {value!r}")
        return value.lower() in ("true", "1")
    for number, article in ((int, "an"), (float, "a")):
        if text.startswith(number.__name__):
            try:
                return number(value)
            except ValueError:
                raise UsageError(
                    f"{key} takes {article} {number.__name__}, got {value!r}"
                ) from None
    return value


def apply_settings[C](config: C, changes: Mapping[str, Any]) -> C:
    """A copy of `config` with `changes` (keys as `resolve_key` reads them, text coerced); each
    section is rebuilt in one `replace`, so its checks see all its changes at once."""
    tree = _Node()
    for key, value in changes.items():
        path = resolve_key(config, key).split(".")
        *sections, name = path
        node, parent = tree, config
        for part in sections:
            node = node.setdefault(part, _Node())
            parent = getattr(parent, part)
        current = getattr(parent, name)
        if is_dataclass(current):
            if not isinstance(value, type(current)):
                names = [f"{'.'.join(path)}.{f.name}, ..." for f in fields(current)]
                raise UsageError(
                    f"config key {key!r} is a section: set one of its fields "
                    f"({names[0] if names else '.'.join(path)})"
                )
            node.setdefault(name, _Node())[_BASE] = value
        else:
            annotation = next(f.type for f in fields(parent) if f.name == name)
            node[name] = coerce_text(value, key, annotation)
    return _rebuild(config, tree) if tree else config


def build_config[C](cls: type[C], data: Mapping[str, Any], prefix: str = "") -> C:
    """The config `cls` from its `asdict` form (run.json's `config`): a missing field at its
    default, lists back to tuples; an unknown key or bad value is a one-line UsageError."""
    if not isinstance(data, Mapping):
        raise UsageError(f"config key {prefix.rstrip('.')!r} must be a section, got {data!r}")
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise UsageError(f"unknown config key {prefix + unknown[0]!r} (valid: {', '.join(known)})")
    defaults = cls()
    kwargs = {}
    for name, value in data.items():
        current = getattr(defaults, name)
        if is_dataclass(current):
            kwargs[name] = build_config(type(current), value, f"{prefix}{name}.")
        elif isinstance(current, tuple) and isinstance(value, list):
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    try:
        return cls(**kwargs)
    except UsageError:
        raise
    except (TypeError, ValueError) as e:
        raise UsageError(f"invalid {prefix.rstrip('.') or 'config'}: {e}") from None


def resolve_key(config: Any, key: str) -> str:
    """The dotted path `key` names: a path from the root, else a bare name unique in the tree
    (`steps`; `capture_groups` is `capture.groups`); renamed, unknown or ambiguous keys raise."""
    if key in RENAMED:
        new = RENAMED[key]
        raise UsageError(
            f"setting {key!r} is now {new!r} (rlkit.recipe.Recipe, SkyRL's names, which both "
            f"backends share): by plain name it is now the recipe switch "
            f"{new.removeprefix('recipe.')!r}"
        )
    noun = getattr(type(config), "KEY_NOUN", "config key")
    head = key.split(".", 1)[0]
    if "." in key or head in {f.name for f in fields(config)}:
        return _walk(config, key, noun)
    found = [p for p in _paths(config) if p[-1] == key or "_".join(p[-2:]) == key]
    if len(found) == 1:
        return ".".join(found[0])
    if found:
        listed = ", ".join(".".join(p) for p in found)
        raise UsageError(f"{noun} {key!r} is ambiguous: write one of {listed}")
    names: dict[str, str] = {}
    for path in _paths(config):
        names |= {path[-1]: ".".join(path), "_".join(path[-2:]): ".".join(path)}
    near = difflib.get_close_matches(key, list(names), n=1)
    hint = f" (did you mean {names[near[0]]}?)" if near else ""
    top = [f.name + (".*" if is_dataclass(getattr(config, f.name)) else "") for f in fields(config)]
    raise UsageError(
        f"unknown {noun} {key!r}{hint}: valid are {', '.join(top)}, or a field's own name "
        "where it is unique"
    )


class _Node(dict):
    """A section's changes: field -> value or `_Node`; at `_BASE` a whole replacing instance."""


def _walk(config: Any, key: str, noun: str) -> str:
    obj: Any = config
    parts = key.split(".")
    for depth, part in enumerate(parts):
        if not is_dataclass(obj):
            raise UsageError(f"config key {key!r} goes below a plain value")
        names = [f.name for f in fields(obj)]
        if part not in names:
            if depth:
                noun = getattr(type(obj), "KEY_NOUN", noun)
            near = difflib.get_close_matches(part, names, n=1)
            tail = tuple(parts[depth + 1 :])  # `grpo.lr` where `lr` lives in another section
            moved = [
                ".".join(p)
                for p in _paths(config)
                if tail and len(p) > len(tail) and p[-len(tail) :] == tail
            ]
            where = ".".join(parts[:depth] + near) if near else " or ".join(moved)
            hint = f" (did you mean {where}?)" if where else ""
            raise UsageError(f"unknown {noun} {key!r}{hint}: valid here are {', '.join(names)}")
        obj = getattr(obj, part)
    return key


def _paths(obj: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every field's path below `obj`, sections and their fields alike, depth first."""
    for f in fields(obj):
        yield (*prefix, f.name)
        if is_dataclass(value := getattr(obj, f.name)):
            yield from _paths(value, (*prefix, f.name))


def _rebuild(obj: Any, node: _Node) -> Any:
    changes = {
        name: _rebuild(change.get(_BASE, getattr(obj, name)), change)
        if isinstance(change, _Node)
        else change
        for name, change in node.items()
        if name != _BASE
    }
    return replace(obj, **changes)


@dataclass(frozen=True)
class CaptureConfig:
    """Training rollouts kept under RUN/rollouts/ on either backend (a few whole groups a step)."""

    groups: int = 2
    """Groups captured per step, picked from (seed, step); 0: off."""
    keep: int | None = 50
    """Captured steps kept on disk (the newest; None: all)."""

    def __post_init__(self) -> None:
        if self.groups < 0:
            raise UsageError(f"capture_groups ({self.groups}) must be >= 0 (0: capture off)")
        if self.keep is not None and self.keep < 1:
            raise UsageError(
                f"capture_keep ({self.keep}) must be >= 1 steps, or none to keep every "
                "captured step"
            )
