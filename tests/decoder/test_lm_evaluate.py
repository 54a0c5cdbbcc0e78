"""`sims.decoder.evaluate` on outcomes with a known phase structure; the figures of the decoder family."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from scipy import stats  # noqa: E402

from weakspots.idealized import metrics  # noqa: E402
from weakspots.idealized.decoder.config import LMConfig  # noqa: E402
from weakspots.sims.decoder import evaluate  # noqa: E402

CONFIG = LMConfig(seq_len=40, pairs=2, stride=4, eval_samples=3)


def outcomes_where(predicate, config=CONFIG):
    data = evaluate.config_evaluation_set(config)
    return predicate(data.value_start, data.key_start)


def test_evaluation_set_covers_every_value_position_equally():
    data = evaluate.config_evaluation_set(CONFIG)
    task = CONFIG.task
    positions, counts = np.unique(data.value_start, return_counts=True)
    np.testing.assert_array_equal(positions, np.arange(1, task.context_len))
    assert np.all(counts == CONFIG.eval_samples)
    np.testing.assert_array_equal(data.starts[:, 0], data.key_start)
    again = evaluate.evaluation_set(task, CONFIG.eval_samples, CONFIG.eval_seed)
    assert again is data  # drawn once per task


def test_each_seed_has_its_own_evaluation_set_drawn_deterministically():
    """Run sets share the queried fact's positions (the labels) but not the other facts'
    placements nor the tokens; each is the same on a second draw; the shared set is the
    draw from `eval_seed` alone."""
    import jax

    from weakspots.idealized.decoder.recall import placed_batch

    task, n, seed = CONFIG.task, CONFIG.eval_samples, CONFIG.eval_seed
    sets = [evaluate.evaluation_set(task, n, seed, run) for run in (0, 1)]
    shared = evaluate.config_evaluation_set(CONFIG)
    for data in sets:
        np.testing.assert_array_equal(data.value_start, shared.value_start)
        np.testing.assert_array_equal(data.key_start, shared.key_start)
    assert not np.array_equal(sets[0].starts, sets[1].starts)
    assert not np.array_equal(sets[0].starts, shared.starts)
    evaluate._evaluation_set.cache_clear()
    again = evaluate.evaluation_set(task, n, seed, 1)
    assert again is not sets[1]
    np.testing.assert_array_equal(again.starts, sets[1].starts)
    legacy = evaluate.evaluation_set(task, n, seed)  # drawn again from default_rng(eval_seed)
    np.testing.assert_array_equal(legacy.starts, shared.starts)
    rows = jax.numpy.asarray(shared.starts[:8])
    draw = jax.jit(lambda key: placed_batch(key, task, rows).tokens)
    tokens = [np.asarray(draw(evaluate.token_key(seed, run))) for run in (None, 0, 1, 1)]
    assert not np.array_equal(tokens[0], tokens[1]) and not np.array_equal(tokens[1], tokens[2])
    np.testing.assert_array_equal(tokens[2], tokens[3])


def test_seeds_are_clusters_in_the_phase_summary():
    """Two seeds that disagree at phase 1 (one always right, one always wrong there): the
    pooled accuracy is 0.5 as before, but the interval holds both seeds' accuracies (t with
    1 df over the seeds) where the pooled Wilson interval is narrow; agreeing seeds give
    the pooled Wilson interval; `delta_max_ci` spans the seeds' own gaps."""
    good = outcomes_where(lambda v, k: np.ones_like(v, bool))
    bad = outcomes_where(lambda v, k: v % 4 != 1)
    out = evaluate.phase_summary(CONFIG, np.stack([good, bad]))
    assert out["phase_accuracy"][1] == 0.5 and out["interval"] == "seed clusters"
    assert out["phase_accuracy_per_seed"] == [[1.0] * 4, [1.0, 0.0, 1.0, 1.0]]
    assert out["phase_accuracy_ci"][1] == pytest.approx([0.0, 1.0])
    n = out["phase_samples"][1]
    wilson = metrics.wilson_interval(np.array(n // 2) / n, np.array(n))
    assert np.ptp(wilson) < 0.5
    n0 = out["phase_samples"][0]
    assert out["phase_accuracy_ci"][0] == pytest.approx(
        metrics.wilson_interval(np.array(n0) / n0, np.array(n0)).tolist()
    )  # agreeing seeds at the ceiling
    low, high = out["delta_max_ci"]
    assert low <= 0.0 and high >= 1.0 and out["interval_gap"] < 0
    single = evaluate.phase_summary(CONFIG, bad)
    assert single["interval"] == "wilson" and single["delta_max_ci"] is None


def test_seed_noise_floor_is_the_binomial_floor_for_one_seed():
    acc, samples = np.array([[0.9, 0.8, 0.85, 0.95]]), np.array([50, 60, 60, 60])
    pooled = float((acc[0] * samples).sum() / samples.sum())
    assert evaluate.seed_noise_floor(acc, samples) == evaluate.delta_max_noise_floor(
        pooled, samples
    )


def test_phase_resolution_of_a_known_weak_phase():
    """Outcomes wrong exactly when the value sits at phase 0 (the fact straddles a boundary)."""
    out = evaluate.phase_summary(CONFIG, outcomes_where(lambda v, k: v % 4 != 0))
    assert out["phase_accuracy"] == [0.0, 1.0, 1.0, 1.0]
    assert out["phase_accuracy_by_key_phase"] == [1.0, 1.0, 1.0, 0.0]  # key one token earlier
    assert out["straddle_accuracy"]["straddling"]["accuracy"] == 0.0
    assert out["straddle_accuracy"]["same_window"]["accuracy"] == 1.0
    assert out["delta_max"] == 1.0 and out["worst_phase"] == 0 and out["interval_gap"] > 0
    assert out["position_spectrum"]["dominant_period"] == pytest.approx(4.0)
    assert out["buckets"]["boundary"] == 0.5
    # a harmonic at 1/s: the fundamental carries the sawtooth
    assert out["harmonic_spectrum"][1] == pytest.approx(0.25)


def test_facts_the_query_reaches_uncompressed_are_counted_apart():
    """Wrong answers only within the sliding window of the first query: every phase is perfect."""
    reach = evaluate.query_reach(CONFIG)
    assert reach == CONFIG.window
    ctx = CONFIG.task.context_len
    out = evaluate.phase_summary(CONFIG, outcomes_where(lambda v, k: v < ctx - reach))
    assert out["phase_accuracy"] == [1.0] * 4 and out["delta_max"] == 0.0
    near = out["near_query"]
    assert near["accuracy"] == 0.0 and near["first_value_start"] == ctx - reach
    assert near["samples"] == reach * CONFIG.eval_samples
    assert sum(out["phase_samples"]) + near["samples"] == (ctx - 1) * CONFIG.eval_samples
    no_sliding = CONFIG.replace(layers=1)  # a compressed layer alone, no local window
    assert evaluate.query_reach(no_sliding) == 0
    # a path of uncompressed branches: the sliding layer, then each local window
    v4 = CONFIG.replace(seq_len=128, layers=3, layout="swa,csa,hca", window=8, local_window=16)
    assert evaluate.query_reach(v4) == 8 + 16 + 16


def test_pooling_runs_multiplies_the_samples():
    single = outcomes_where(lambda v, k: v % 4 != 1)
    one = evaluate.phase_summary(CONFIG, single)
    two = evaluate.phase_summary(CONFIG, np.stack([single, single]))
    assert two["phase_accuracy"] == one["phase_accuracy"]
    assert two["phase_samples"] == [2 * n for n in one["phase_samples"]]


def test_wilson_intervals_per_phase_count():
    ci = metrics.wilson_interval(np.array([5, 0]) / np.array([10, 7]), np.array([10, 7]))
    assert ci[0, 0] < 0.5 < ci[0, 1] and ci[1, 0] == pytest.approx(0.0, abs=1e-12)
    assert ci[1, 1] == pytest.approx(0.3543, abs=1e-3)  # Wilson 95% upper bound of 0/7


def test_noise_floor_against_the_exact_range_distribution():
    """Monte Carlo quantile of max - min of s binomial proportions vs the exact distribution."""
    n, p, s = 40, 0.8, 4
    k = np.arange(n + 1)
    cdf = stats.binom.cdf(k, n, p)
    below = np.concatenate([[0.0], cdf[:-1]])

    def range_cdf(r):  # P(max - min <= r) for counts: sum over the minimum m
        return sum(
            (cdf[min(m + r, n)] - below[m]) ** s - (cdf[min(m + r, n)] - cdf[m]) ** s
            for m in range(n + 1)
        )

    exact = next(r for r in range(n + 1) if range_cdf(r) >= 0.95) / n
    got = evaluate.delta_max_noise_floor(p, [n] * s)
    # the Monte Carlo quantile of a lattice variable lands on the exact value or one step off
    assert abs(got - exact) <= 1 / n + 1e-12


def synthetic_position_results():
    rng = np.random.default_rng(0)
    designs = {}
    for name, config in {
        "compressed": CONFIG,
        "dense": CONFIG.replace(operator="none"),
    }.items():
        data = evaluate.config_evaluation_set(config)
        p = np.where((data.value_start % 4 == 0) & (name == "compressed"), 0.7, 0.9)
        outcomes = rng.random((2, p.size)) < p
        designs[name] = {
            "config": {"operator": config.operator, "stride": 4, "seq_len": config.seq_len, "steps": config.steps},
            "seeds": [0, 1],
            "pooled": evaluate.phase_summary(config, outcomes),
        }
    return {"designs": designs}


def synthetic_family_results():
    rows = []
    for op in ("mean_pool", "deepseek_v4", "none"):
        for stride in (4, 8):
            rows.append(
                {
                    "operator": op,
                    "stride": stride,
                    "seq_len": 128,
                    "delta_max": 0.05,
                    "delta_max_noise_floor": 0.03,
                    "interval_gap": 0.01 if op != "none" else -0.02,
                    "seed_delta_max": [0.04, 0.06],
                }  # fmt: skip
            )
    return {"rows": rows}


@pytest.mark.parametrize("name", ["lm_position", "lm_family"])
def test_figures_draw(name, tmp_path):
    import importlib

    module = importlib.import_module(f"weakspots.figures.{name}")
    results = synthetic_position_results() if name == "lm_position" else synthetic_family_results()
    fig = module.make(results, None)
    fig.savefig(tmp_path / f"{name}.png")
    assert (tmp_path / f"{name}.png").stat().st_size > 0
    assert module.CAPTION
