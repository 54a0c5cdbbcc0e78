"""`sims.experiments.decoder.ablation.causal_study`: straddle phases by brute force, the verdict on reports whose answer is
known by construction, and the attention margin of a decoder whose attention is uniform."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from weakspots.idealized.decoder.config import LMConfig
from weakspots.idealized.decoder.model import Decoder
from weakspots.idealized.metrics import wilson_interval
from weakspots.sims.decoder.evaluate import query_reach
from weakspots.sims.experiments.decoder.ablation import causal_study

N = 4000  # samples per phase of the synthetic reports: intervals about +-0.01


@pytest.mark.parametrize("key_len, value_len, stride", [(1, 1, 4), (2, 1, 4), (1, 2, 4), (3, 2, 8)])
def test_straddle_phases_are_those_where_every_fact_crosses_a_boundary(key_len, value_len, stride):
    config = LMConfig(
        seq_len=8 * stride + 2 * (key_len + value_len) + 2 * stride,
        pairs=2,
        key_len=key_len,
        value_len=value_len,
        stride=stride,
    )
    brute = []
    for p in range(stride):
        starts = [w * stride + p - key_len for w in range(2, 6)]  # value at phase p
        if all(k // stride != (k + key_len + value_len - 1) // stride for k in starts):
            brute.append(p)
    assert causal_study.straddle_phases(config) == brute


def _ci(acc):
    return wilson_interval(np.asarray(acc), N).tolist()


def _report(acc, *, straddling, same_window, zero=None, roll=None, no_rope=None, patch=None):
    """A synthetic `ablate_lm` report: accuracies per phase, straddle split, components' outcomes."""

    def component(kind, after):
        drop = (np.asarray(acc) - np.asarray(after)).tolist()
        half = 0.01
        return {
            "kind": kind,
            "drop": drop,
            "drop_ci": [[d - half, d + half] for d in drop],
            "accuracy": list(after),
            "accuracy_ci": _ci(after),
        }

    components = []
    if zero is not None:
        components.append(component("zero_position_bias", zero))
    if roll is not None:
        components.append(component("roll_position_bias", roll))
    if no_rope is not None:
        components.append(component("no_rope_compressed", no_rope))
    return {
        "phase_accuracy": list(acc),
        "phase_accuracy_ci": _ci(acc),
        "straddle": {
            "straddling": {"accuracy": straddling, "samples": N, "ci": _ci([straddling])[0]},
            "same_window": {"accuracy": same_window, "samples": 3 * N, "ci": _ci([same_window])[0]},
        },
        "components": components,
        "patch": patch,
    }


STRADDLE = LMConfig(operator="softmax_pool")  # key_len 1, value_len 1, s = 4: phase 0 straddles


def test_a_weak_straddle_phase_is_called_straddle():
    report = _report([0.80, 0.95, 0.95, 0.95], straddling=0.80, same_window=0.95)
    found = causal_study.evidence(STRADDLE, report)
    assert found["weak_spot"] and found["straddle"]["weak_spot_without_straddling"] is False
    assert causal_study.verdict(found) == "straddle"


def test_no_weak_spot_within_the_intervals_is_none():
    report = _report([0.950, 0.952, 0.949, 0.951], straddling=0.950, same_window=0.951)
    assert causal_study.verdict(causal_study.evidence(STRADDLE, report)) == "none"


def test_a_bias_that_carries_the_weak_spot_is_pooling_specialisation():
    acc = [0.95, 0.95, 0.80, 0.95]  # phase 2: no fact straddles there
    report = _report(
        acc,
        straddling=0.95,
        same_window=0.90,
        zero=[0.93, 0.93, 0.93, 0.93],
        roll=[0.95, 0.95, 0.95, 0.80],
        no_rope=[0.90, 0.90, 0.75, 0.90],
    )
    found = causal_study.evidence(STRADDLE, report)
    assert found["pooling"]["zero_bias_relieves_worst"]
    assert found["pooling"]["roll_moves_weak_spot"]
    assert not found["rope"]["passes"]
    assert causal_study.verdict(found) == "pooling specialisation"


def test_rope_relief_is_rope_anchoring_and_nothing_is_unexplained():
    acc = [0.95, 0.95, 0.80, 0.95]
    relieved = _report(acc, straddling=0.95, same_window=0.90, no_rope=[0.94, 0.94, 0.93, 0.94])
    assert causal_study.verdict(causal_study.evidence(STRADDLE, relieved)) == "RoPE anchoring"
    worse = _report(acc, straddling=0.95, same_window=0.90, no_rope=[0.5, 0.5, 0.4, 0.5])
    assert causal_study.verdict(causal_study.evidence(STRADDLE, worse)) == "unexplained"


def test_patch_restoration_is_read_at_worst_from_best():
    patch = {
        "patched": [[0.9] * 4] * 4,
        "clean": [[0.8] * 4] * 4,
        "source": [[0.95] * 4] * 4,
        "restored": [[None, 0.1, 0.2, 0.3], [None] * 4, [None] * 4, [0.7, 0.6, 0.5, 0.4]],
    }
    report = _report(
        [0.95, 0.94, 0.90, 0.80], straddling=0.95, same_window=0.88, patch=patch
    )  # worst 3, best 0
    found = causal_study.evidence(STRADDLE, report)
    assert found["patch"]["restored"] == 0.7 and found["patch"]["in_entries"]


def test_uniform_attention_has_zero_margin_and_mass_in_proportion_to_entries():
    """A compressed layer whose queries are zero attends uniformly: margin 0, mass = share of entries."""
    config = LMConfig(
        seq_len=32, pairs=2, key_vocab=8, value_vocab=8, filler_vocab=4, d_model=16, heads=2,
        rope_dim=4, window=4, eval_samples=1, operator="mean_pool",
    )  # fmt: skip
    graph, state = nnx.split(nnx.eval_shape(lambda: Decoder(config.decoder, rngs=nnx.Rngs(0))))
    rng = np.random.default_rng(0)
    leaves, treedef = jax.tree.flatten(state)
    leaves = [jnp.asarray(rng.standard_normal((1, *x.shape)), jnp.float32) for x in leaves]
    params = jax.tree.unflatten(treedef, leaves)
    params["blocks"][1]["attention"]["query"]["kernel"][...] = jnp.zeros((1, 16, 16), jnp.float32)
    out = causal_study.attention_margins(config, params)
    np.testing.assert_allclose(out["margin"], 0.0, atol=1e-5)  # float32 logs of equal numbers
    visible = (config.task.context_len + config.task.key_len) // config.stride
    # a fact of two tokens touches one window, or two where it straddles (value phase 0)
    expected = [2 / visible] + [1 / visible] * 3
    np.testing.assert_allclose(out["mass"][0][0], expected, rtol=1e-5)
    assert query_reach(config) == 4
    # the entries one window on: as many (every far fact's next window is visible), as much
    np.testing.assert_allclose(
        causal_study.entry_mass(config, params, 1)[0][0], expected, rtol=1e-5
    )
    np.testing.assert_allclose(causal_study.entry_mass(config, params, 0), out["mass"], rtol=1e-6)


def test_a_weak_spot_no_candidate_explains_but_patching_restores_is_located_in_the_entries():
    restored = [[None] * 4 for _ in range(4)]
    restored[3][0] = 0.8  # worst phase 3, best phase 0
    patch = {"patched": [[0.9] * 4] * 4, "clean": [[0.8] * 4] * 4, "source": [[0.95] * 4] * 4,
             "restored": restored}  # fmt: skip
    acc = [0.95, 0.94, 0.90, 0.80]
    report = _report(acc, straddling=0.95, same_window=0.88, patch=patch)
    assert (
        causal_study.verdict(causal_study.evidence(STRADDLE, report))
        == "unexplained, in the entries"
    )
