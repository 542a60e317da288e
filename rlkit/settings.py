"""Typed `--set KEY=VALUE` values: one coercion for every config that takes text from a command
line or a notebook parameter (the local trainer's sections, the recipe's switches, SkyRL
presets), so `true`, `none` and numbers mean the same everywhere and a wrong type is one line.

    coerce_text("0.28", "recipe.eps_clip_high", float)   # 0.28
    coerce_text("none", "schedule.keep", int)            # None
"""

from __future__ import annotations

from typing import Any

from rlkit.errors import UsageError


def coerce_text(value: Any, key: str, kind: type | None, *, nullable: bool = True) -> Any:
    """`value` as a `kind` (bool, int, float; None: an int or a float if it reads as one, else
    the text) when it is text, else unchanged. `none`/`null` give None where `nullable`; a
    value that is not a `kind` is a one-line UsageError naming `key`."""
    if not isinstance(value, str):
        return value
    if nullable and value.lower() in ("none", "null"):
        return None
    if kind is bool:
        if value.lower() not in ("true", "false", "1", "0"):
            raise UsageError(f"{key} takes true or false, got {value!r}")
        return value.lower() in ("true", "1")
    for number in (int, float):
        if kind is number or kind is None:
            try:
                return number(value)
            except ValueError:
                if kind is not None:
                    article = "an" if number is int else "a"
                    raise UsageError(
                        f"{key} takes {article} {number.__name__}, got {value!r}"
                    ) from None
    return value


def annotation_kind(annotation: Any) -> tuple[type | None, bool]:
    """(kind, nullable) of a dataclass field's annotation as text (`from __future__ import
    annotations`): `"float | None"` -> (float, True); a str or other type -> (str, ...)."""
    text = str(annotation)
    for kind in (bool, int, float):
        if text.startswith(kind.__name__):
            return kind, "None" in text
    return str, "None" in text
