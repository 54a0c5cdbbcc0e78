"""Checks of config values shared by every family's configs: each raises `ConfigError`
naming the field's flag and the value given."""

from __future__ import annotations

import math
import numbers

from weakspots.errors import ConfigError

# The largest float32: the trainer holds hyperparameters as float32 arrays.
FLOAT32_MAX = 3.4028234663852886e38
# The smallest normal float32: a positive hyperparameter below it rounds towards 0.
FLOAT32_TINY = 1.1754943508222875e-38


def int_at_least(field: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(field, f"must be an integer >= {low}, got {value!r}")


def positive_finite(field: str, value) -> None:
    if not is_real(value) or not math.isfinite(value) or value <= 0:
        raise ConfigError(field, f"must be a finite number > 0, got {value!r}")


def nonnegative_finite(field: str, value) -> None:
    if not is_real(value) or not math.isfinite(value) or value < 0:
        raise ConfigError(field, f"must be a finite number >= 0, got {value!r}")


def is_real(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def float32(field: str, value) -> None:
    """A hyperparameter the trainer holds in float32: finite there, and a positive one not 0."""
    if value > FLOAT32_MAX or 0 < value < FLOAT32_TINY:
        raise ConfigError(
            field,
            f"must be 0 or between {FLOAT32_TINY:.3g} and {FLOAT32_MAX:.3g} (float32), got {value!r}"
            if field in ("weight_decay", "init_scale")
            else f"must be between {FLOAT32_TINY:.3g} and {FLOAT32_MAX:.3g} (float32), got {value!r}",
        )


def boolean(field: str, value) -> None:
    if not isinstance(value, bool):
        raise ConfigError(field, f"must be true or false, got {value!r}")


def canonical_numbers(config, floats: tuple[str, ...], ints: tuple[str, ...] = ()) -> None:
    """Give float fields float values (`16` -> `16.0`, `-0.0` -> `0.0`) and integer fields
    plain ints (`numpy.int64(3)` -> `3`), before validation.

    A config is hashed by its values' JSON (`sims.store.config_hash`), so one logical run
    must have one spelling: an integer for a float field, or a negative zero, would store
    it twice.
    """
    for name in floats:
        value = getattr(config, name)
        if is_real(value):
            try:
                value = float(value) + 0.0
            except OverflowError:  # an int past float's range
                value = math.inf
            object.__setattr__(config, name, value)
    for name in ints:
        value = getattr(config, name)
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            object.__setattr__(config, name, int(value))


def one_of(field: str, value, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(field, f"must be one of {', '.join(allowed)}; got {value!r}")
