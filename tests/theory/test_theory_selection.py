"""theory.selection: the block reduction is exact on its subspace, the cut-local race law
against the d = inf flow (total variation per config), and the learned-gain law."""

import numpy as np
import pytest

from weakspots import theory
from weakspots.theory.reduced import reduced_loss
from weakspots.theory.selection import (
    COVERED,
    block_flow,
    block_loss,
    cut_blocks,
    expected_order_statistics,
    learned_gain_law,
    phase_order,
    reentry_closure,
    support_size_law,
)

EXACT = 1e-12  # float64 sums of the same terms in another order


def test_block_loss_is_the_reduced_loss_of_the_expanded_state():
    rng = np.random.default_rng(0)
    heads = 2
    blocks = [(0, 3), (3, 4), (4, 5), (5, 9)]
    multiplicity = np.array([b - a for a, b in blocks], float)
    logits = rng.standard_normal((heads, len(blocks)))
    expanded = np.repeat(logits, multiplicity.astype(int), axis=-1)
    gains = np.full(heads, 12.0)
    for loss in ("mse", "ce"):
        got = float(block_loss(logits, multiplicity, gains, 30.0, 9, loss))
        want = float(reduced_loss(expanded, gains, 30.0, loss))
        assert got == pytest.approx(want, rel=EXACT)


def test_the_flow_keeps_the_order_of_the_starting_logits():
    """Mean field: every phase follows one 1-D equation, so phases never cross; the end
    state covers the k largest starting logits."""
    rng = np.random.default_rng(1)
    starts = 0.01 * rng.standard_normal((8, 1, 7))
    weights, _ = block_flow(starts, np.ones(7), 14.0, 30, 7, 4000.0)
    for start, end in zip(starts[:, 0], weights[:, 0], strict=True):
        order = np.argsort(-start)
        assert np.all(np.diff(end[order]) <= 1e-12)
        k = int((end > COVERED / 7).sum())
        assert set(np.flatnonzero(end > COVERED / 7)) == set(order[:k])


def test_cut_blocks_partition_the_ranks_around_the_cuts():
    assert cut_blocks(12, (8,), 2) == [(0, 6), (6, 7), (7, 8), (8, 9), (9, 10), (10, 12)]
    assert cut_blocks(8, (3, 5), 1) == [(0, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 8)]
    blocks = cut_blocks(16, (1,), 2)
    assert blocks[0] == (0, 1) and blocks[-1] == (3, 16)
    assert [a for a, _ in blocks[1:]] == [b for _, b in blocks[:-1]]


def test_blom_order_statistics_are_within_their_stated_error():
    # Blom's approximation is within 0.02 of the exact expected normal order statistics for
    # s >= 4 (largest of 4: 1.0491 against 1.0294); 5e4 sampled vectors put the Monte Carlo
    # error near 0.004.
    rng = np.random.default_rng(2)
    for s in (4, 9, 16):
        sampled = -np.sort(-rng.standard_normal((50_000, s)), axis=-1).mean(axis=0)
        np.testing.assert_allclose(expected_order_statistics(s), sampled, atol=0.025)


def test_two_heads_order_phases_by_the_differential_mode():
    logits = np.array([[0.3, -0.1, 0.2, 0.0], [-0.2, 0.4, 0.1, 0.0]])
    np.testing.assert_array_equal(phase_order(logits), [0, 2, 3, 1])  # by a_1 - a_2


def test_closure_stops_at_the_first_size_stable_against_reentry():
    s, n, gain = 12, 60, 24.0
    kappa = [theory.reentry_rate(s, n, gain, k) for k in range(1, s)]
    first = 1 + next(i for i, x in enumerate(kappa) if x <= 0)
    np.testing.assert_array_equal(reentry_closure(s, n, gain, [1, first - 1, first, s]),
                                  [first, first, first, s])  # fmt: skip


def test_law_is_uniform_where_uniform_pooling_is_stable():
    assert support_size_law(8, 12, 16.0)["law"] == {8: 1.0}
    assert support_size_law(8, 5, 16.0, heads=2)["law"] == {8: 1.0}


# (stride, chunks, gain, heads): s 4..16, N from just past N_c to 300, gain 8..32
LAW_CONFIGS = [
    (4, 100, 8.0, 1),
    (6, 11, 9.0, 1),
    (7, 30, 14.0, 1),
    (8, 64, 24.0, 1),
    (12, 20, 24.0, 1),
    (16, 24, 32.0, 1),
    (10, 300, 20.0, 1),
    (16, 300, 24.0, 1),
    (8, 64, 16.0, 2),
    (12, 40, 24.0, 2),
    (5, 40, 9.0, 2),
]
FLOW_STARTS = 256
LAW_SAMPLES = 512
TV_TARGET = 0.1  # the target; sampling alone gives ~0.03 at these sample sizes


def total_variation(p, q):
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


@pytest.mark.slow  # about 25 min on 2 cores
@pytest.mark.parametrize(("stride", "chunks", "gain", "heads"), LAW_CONFIGS)
def test_support_size_law_matches_the_flow(stride, chunks, gain, heads):
    """The law from 512 starts against sims.toy.flow.solve_many from 256 other starts (init
    scale 0.01, the law's horizon): total variation within TV_TARGET."""
    from weakspots.idealized.toy.config import FlowConfig
    from weakspots.sims.toy.flow import solve_many, stack

    law = support_size_law(stride, chunks, gain, heads, samples=LAW_SAMPLES, seed=1)
    starts = 0.01 * np.random.default_rng(2).standard_normal((FLOW_STARTS, heads, stride))
    config = FlowConfig(stride=stride, chunks=chunks, heads=heads, gain=gain, t1=law["t_end"])
    history = stack(solve_many([config] * FLOW_STARTS, starts=list(starts)))
    final = np.asarray(history.pooling_weights)[:, -1]
    k = (final > COVERED / stride).any(axis=1).sum(axis=-1)
    sizes, counts = np.unique(k, return_counts=True)
    flow = {int(a): n / FLOW_STARTS for a, n in zip(sizes, counts, strict=True)}
    assert total_variation(law["law"], flow) <= TV_TARGET, (law["law"], flow)


@pytest.mark.slow  # about 6 min on 2 cores
def test_learned_gain_law_matches_the_flow_where_the_end_state_depends_on_the_start():
    """s=6 N=40 wd 2e-3, gain learned (linear) from 1: the flow ends on one phase (gain 5.1)
    or two (gain 9.28) depending on the start; the law's P(k=2) within the 95% binomial
    interval of 128 flows, and its gains equal the flow's."""
    from scipy.stats import binom

    from weakspots.idealized.toy.config import FlowConfig
    from weakspots.sims.toy.flow import solve_many, stack

    s, n, wd, flows = 6, 40, 2e-3, 128
    law = learned_gain_law(s, n, 1.0, wd, 0.01, 2e5, "linear", samples=512, seed=3)
    starts = 0.01 * np.random.default_rng(4).standard_normal((flows, 1, s))
    config = FlowConfig(
        stride=s, chunks=n, gain=1.0, learn_gain=True, weight_decay=wd,
        gain_parametrisation="linear", t1=2e5,
    )  # fmt: skip
    history = stack(solve_many([config] * flows, starts=list(starts)))
    k = (np.asarray(history.pooling_weights)[:, -1, 0] > COVERED / s).sum(axis=-1)
    gains = np.asarray(history.gain)[:, -1, 0]
    assert set(np.unique(k)) <= set(law["law"])
    low, high = binom.interval(0.95, flows, law["law"].get(2, 0.0))
    assert low <= np.sum(k == 2) <= high
    for size in np.unique(k):
        assert np.median(gains[k == size]) == pytest.approx(law["gain"][int(size)], rel=1e-3)


@pytest.mark.slow  # about 15 s on 2 cores
def test_learned_gain_law_reaches_theorys_weight_decay_grid():
    """docs/theory.md §6.6 (s=8, N=64, gain from 1, linear, t = 2e5): wd 3e-4 ends on 3
    phases at gain 17.5; the law puts all its mass there."""
    three = learned_gain_law(8, 64, 1.0, 3e-4, 1e-3, 2e5, "linear", samples=16)
    assert three["law"] == {3: 1.0} and three["gain"][3] == pytest.approx(17.5, abs=0.05)
