"""The one list of compression operators: a new operator is one file and one `register` line.

Every consumer asks here: the configs' validation (`operator_names`, the facts of
`lookup(name)`), the toy's and the decoder's compressors, the interventions' position
parameters, the experiments' operator lists and the command line's help.

`mean_pool` and the phase-entropy regulariser: its weights `1/s` are a distribution over
phases (`distribution`), but a fixed one (`fixed_weights`), so the regulariser is a
constant there. The structural config (`ModelConfig`, which only asks whether the
regulariser is defined) accepts it; a training run (`TrainConfig`, `LMConfig`) refuses it,
as it refuses any flag that changes nothing.
"""

from __future__ import annotations

from weakspots import validation as check
from weakspots.errors import ConfigError
from weakspots.idealized.operators.base import FAMILIES, AbstractOperator
from weakspots.idealized.operators.deepseek_v4 import DeepSeekV4
from weakspots.idealized.operators.linear import LinearPool
from weakspots.idealized.operators.low_rank import LowRank
from weakspots.idealized.operators.max_pool import MaxPool
from weakspots.idealized.operators.mean_pool import MeanPool
from weakspots.idealized.operators.none import NoPool
from weakspots.idealized.operators.softmax_pool import SoftmaxPool

_REGISTRY: dict[str, type[AbstractOperator]] = {}


def register(operator: type[AbstractOperator]) -> type[AbstractOperator]:
    """Add `operator` under `operator.name` (usable as a class decorator); returns it."""
    if operator.name in _REGISTRY:
        raise ValueError(f"operator {operator.name!r} is already registered")
    if not operator.families or set(operator.families) - set(FAMILIES):
        raise ValueError(f"families must be some of {FAMILIES}, got {operator.families!r}")
    _REGISTRY[operator.name] = operator
    return operator


def unregister(name: str) -> None:
    """Remove the operator registered as `name`."""
    del _REGISTRY[name]


def operator_names(family: str | None = None, **facts) -> tuple[str, ...]:
    """Names in registration order, of operators supporting `family` with the given class facts
    (e.g. `operator_names("toy", phase_weighted=True)`)."""
    return tuple(
        name
        for name, op in _REGISTRY.items()
        if (family is None or family in op.families)
        and all(getattr(op, fact) == value for fact, value in facts.items())
    )


def lookup(name: str, family: str | None = None) -> type[AbstractOperator]:
    """The operator registered as `name` (for `family`); a `ConfigError` on `--operator` if none."""
    allowed = operator_names(family)
    if name not in allowed:
        raise ConfigError("operator", f"must be one of {', '.join(allowed)}; got {name!r}")
    return _REGISTRY[name]



def check_phase_entropy(value, operator: str, family: str) -> None:
    """`phase_entropy` is finite, >= 0, and > 0 only for an operator of `family` whose pooling
    weights form a distribution over phases."""
    check.nonnegative_finite("phase_entropy", value)
    operators = operator_names(family, distribution=True)
    if value > 0 and operator not in operators:
        raise ConfigError(
            "phase_entropy",
            f"needs pooling weights that form a distribution over phases "
            f"({', '.join(operators)}), not {operator}",
        )


def check_fixed_weights(phase_entropy, operator: str) -> None:
    """A training run refuses `phase_entropy` where the pooling weights have no parameter."""
    if phase_entropy > 0 and lookup(operator).fixed_weights:
        raise ConfigError(
            "phase_entropy",
            f"{operator}'s pooling weights are fixed, so the regulariser changes nothing "
            f"(got {phase_entropy!r})",
        )


register(SoftmaxPool)
register(MeanPool)
register(LinearPool)
register(MaxPool)
register(LowRank)
register(DeepSeekV4)
register(NoPool)
