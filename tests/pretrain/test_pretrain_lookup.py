"""The paper's lookup: position-matched designs for both paddings, the scoring, the report."""

import argparse
import dataclasses
import math

import numpy as np
import pytest

from weakspots.idealized import metrics
from weakspots.idealized.pretrain.tokenizer import Tokenizer
from weakspots.sims.pretrain import lookup

MODULUS = 24


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.default()


@pytest.fixture(scope="module", params=lookup.PADDINGS)
def prompts(request):
    return lookup.design(request.param, modulus=MODULUS, prompts_per_residue=24, seed=3)


def test_design_holds_query_and_target_moments_fixed(prompts):
    """One query position; per residue group the same mean (within a token) and variance
    (within 2%) of the target key's position, computed here from the prompts."""
    assert len(prompts) == MODULUS * 24 >= 48
    assert len({p.query_position for p in prompts}) == 1
    assert all(p.tokens.size == p.query_position + 1 for p in prompts)
    position = np.array([p.target_position for p in prompts], dtype=np.float64)
    residue = np.array([p.residue for p in prompts])
    assert np.array_equal(residue, position.astype(int) % MODULUS)
    means = [position[residue == r].mean() for r in range(MODULUS)]
    variances = [position[residue == r].var() for r in range(MODULUS)]
    assert np.bincount(residue).tolist() == [24] * MODULUS
    assert max(means) - min(means) <= 1.0
    assert max(variances) / min(variances) <= 1.02
    stats = lookup.design_statistics(prompts, MODULUS)
    assert stats["mean_range"] == pytest.approx(max(means) - min(means))
    assert stats["variance_ratio"] == pytest.approx(max(variances) / min(variances))


def test_every_prompt_is_a_lookup_of_64_records(prompts, tokenizer):
    keys, values = set(tokenizer.key_ids), set(tokenizer.value_ids)
    filler = tokenizer.ids[lookup.FILLER]
    for p in prompts:
        t = p.tokens
        assert t[0] == tokenizer.doc_id and t[-1] == t[p.target_position] in keys
        assert t[p.target_position + 1] == p.answer in values
        body = t[1:-1][t[1:-1] != filler]
        records, demos = body[: 2 * lookup.RECORDS], body[2 * lookup.RECORDS :]
        assert demos.size == 2 * lookup.DEMONSTRATIONS
        assert set(records[0::2]) <= keys and set(records[1::2]) <= values
        assert len(set(records[0::2])) == len(set(records[1::2])) == lookup.RECORDS
        record_of = dict(zip(records[0::2], records[1::2], strict=True))
        assert all(record_of[k] == v for k, v in zip(demos[0::2], demos[1::2], strict=True))
        assert t[-1] not in demos[0::2]  # the target is not demonstrated
        assert records[2 * p.target_record] == t[-1]
        assert lookup.MIDDLE[0] <= p.target_record < lookup.MIDDLE[1]
        assert p.query_position - p.target_position > lookup.LOCAL_WINDOW
        # the records and demonstrations are adjacent key-value pairs
        key_at = np.flatnonzero(np.isin(t[:-1], list(keys)))
        assert np.all(np.isin(t[key_at + 1], list(values)))


def _key_offsets(prompts, tokenizer):
    """Every distractor record key's position minus its prompt's target key position."""
    keys = tokenizer.key_ids
    offsets = []
    for p in prompts:
        at = np.flatnonzero(np.isin(p.tokens[:-1], keys))
        records = at[at < p.query_position - 2 * lookup.DEMONSTRATIONS]
        offsets.append(records[records != p.target_position] - p.target_position)
    return np.concatenate(offsets)


def test_prefix_moves_records_together_and_in_sequence_apart(tokenizer):
    prefix = lookup.design("prefix", prompts_per_residue=24, seed=1)
    spread = lookup.design("in-sequence", prompts_per_residue=24, seed=1)
    for a, b in zip(prefix, spread, strict=True):  # the same targets, records and answers
        assert (a.target_position, a.answer, a.target_record) == (
            b.target_position,
            b.answer,
            b.target_record,
        )
    together = _key_offsets(prefix, tokenizer)
    assert set(np.unique(together % 8)) <= {
        0,
        2,
        4,
        6,
    }  # every 2 tokens: phase moves with the target
    apart = np.bincount(_key_offsets(spread, tokenizer) % 8, minlength=8) / together.size
    assert np.all(np.abs(apart - 1 / 8) < 0.02)


def test_same_arguments_same_prompts():
    a = lookup.design("in-sequence", prompts_per_residue=4, modulus=8, seed=2)
    b = lookup.design("in-sequence", prompts_per_residue=4, modulus=8, seed=2)
    c = lookup.design("in-sequence", prompts_per_residue=4, modulus=8, seed=9)
    assert all(np.array_equal(x.tokens, y.tokens) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x.tokens, y.tokens) for x, y in zip(a, c, strict=True))


@pytest.mark.parametrize("modulus, per_residue", [(24, 24), (24, 48), (8, 16), (12, 36)])
def test_target_offsets_have_exact_means_and_close_variances(modulus, per_residue):
    offsets = lookup.target_offsets(modulus, per_residue, spread=48.0)
    assert sorted(offsets) == list(range(-(modulus // 2), modulus - modulus // 2))
    for a, x in offsets.items():
        assert x.size == per_residue and np.all((x - a) % modulus == 0)
        assert x.mean() == 0  # per_residue a multiple of modulus: the lattice's mean is exact
    variances = [np.var(x) for x in offsets.values()]
    assert max(variances) / min(variances) <= 1.02
    granularity = 2 * modulus**2 / per_residue  # one pair move's change of a group's variance
    assert 0.9 * 48.0**2 - granularity <= np.mean(variances) <= 1.1 * 48.0**2 + granularity


def test_bad_arguments_name_their_flag():
    for kwargs, flag in [
        ({"padding": "middle"}, "--padding"),
        ({"padding": "prefix", "modulus": 1}, "--modulus"),
        ({"padding": "prefix", "prompts_per_residue": 1}, "--prompts-per-residue"),
        ({"padding": "prefix", "length": 100}, "--length"),
        ({"padding": "prefix", "spread": 0.0}, "--spread"),
    ]:
        with pytest.raises(ValueError, match=f"^{flag}"):
            lookup.design(**kwargs)


def _one_hot_last(predicted, tokens, vocab):
    """Logits `(B, T, V)` whose last position's top-1 is `predicted` (a broadcast view)."""
    last = np.zeros((tokens.shape[0], 1, vocab), dtype=np.float32)
    last[np.arange(tokens.shape[0]), 0, predicted] = 1.0
    return np.broadcast_to(last, (*tokens.shape, vocab))


def perfect_induction(vocab):
    """The token after the previous occurrence of the last token: the lookup's answer."""

    def logits_fn(tokens):
        predicted = []
        for row in tokens:
            earlier = np.flatnonzero(row[:-1] == row[-1])
            predicted.append(row[earlier[-1] + 1] if earlier.size else 0)
        return _one_hot_last(np.array(predicted), tokens, vocab)

    return logits_fn


def phase_blind(vocab, stride, misses, filler):
    """Induction that fails when the earlier key's position modulo `stride` is in `misses`."""

    def logits_fn(tokens):
        predicted = []
        for row in tokens:
            at = np.flatnonzero(row[:-1] == row[-1])[-1]
            predicted.append(filler if at % stride in misses else row[at + 1])
        return _one_hot_last(np.array(predicted), tokens, vocab)

    return logits_fn


def test_evaluate_scores_a_perfect_and_a_phase_blind_model(tokenizer):
    prompts = lookup.design("in-sequence", prompts_per_residue=24, seed=4)
    vocab = tokenizer.vocab_size
    perfect = lookup.evaluate(perfect_induction(vocab), prompts, batch=100)
    assert perfect["accuracy"] == 1.0 and perfect["residue_accuracy"] == [1.0] * MODULUS
    assert perfect["residue_counts"] == [24] * MODULUS
    blind = lookup.evaluate(
        phase_blind(vocab, 8, {5, 6, 7}, tokenizer.ids[lookup.FILLER]), prompts, batch=50
    )
    expected = [0.0 if r % 8 in {5, 6, 7} else 1.0 for r in range(MODULUS)]
    assert blind["residue_accuracy"] == expected
    assert blind["accuracy"] == pytest.approx(5 / 8)
    report = lookup.report([blind, perfect])
    assert report["residue_accuracy"] == [expected, [1.0] * MODULUS]
    assert report["gap"] == 0.5 and report["dominant_period"] == 8
    single = lookup.report([blind])
    assert single["gap"] == 1.0 and single["gap_beyond_intervals"]
    assert single["gap_noise_floor"] is None


def _result(accuracy, samples):
    accuracy = np.asarray(accuracy)
    return {"residue_accuracy": accuracy.tolist(), "residue_counts": [samples] * accuracy.size}


def test_report_statistics_against_direct_computation():
    rng = np.random.default_rng(0)
    samples, seeds = 24, 3
    truth = 0.5 + 0.3 * np.cos(2 * np.pi * np.arange(MODULUS) / 6)  # period 6
    accuracy = rng.binomial(samples, np.broadcast_to(truth, (seeds, MODULUS))) / samples
    report = lookup.report([_result(a, samples) for a in accuracy])
    mean = accuracy.mean(axis=0)
    np.testing.assert_allclose(report["residue_mean"], mean)
    assert report["gap"] == pytest.approx(mean.max() - mean.min())
    assert report["dominant_period"] == 6
    assert report["mean_accuracy"] == pytest.approx(accuracy.mean())
    # Wilson interval of the pooled trials, by its closed form
    n, z = seeds * samples, metrics.WILSON_Z95
    centre = (mean + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z * np.sqrt(mean * (1 - mean) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
    np.testing.assert_allclose(
        np.array(report["residue_wilson"]), np.stack([centre - half, centre + half], axis=1)
    )
    # seeds as clusters: at least as wide as the pooled Wilson interval, holding the mean
    cluster = np.array(report["residue_interval"])
    assert np.all(cluster[:, 0] <= centre - half + 1e-12)
    assert np.all(cluster[:, 1] >= centre + half - 1e-12)
    beyond = cluster[report["worst_residue"], 1] < cluster[report["best_residue"], 0]
    assert report["gap_beyond_intervals"] == beyond
    assert report["gap_noise_floor"] > 0
    # a flat truth: the measured gap is inside the seeds' noise floor most of the time
    inside = 0
    for _ in range(40):
        flat = rng.binomial(samples, 0.5, size=(seeds, MODULUS)) / samples
        r = lookup.report([_result(a, samples) for a in flat])
        inside += r["gap"] <= r["gap_noise_floor"]
    assert inside >= 30


def test_report_refuses_mismatched_seeds():
    with pytest.raises(ValueError, match="same prompts"):
        lookup.report([_result([0.5] * 4, 10), _result([0.5] * 4, 12)])
    assert math.isclose(lookup.report([_result([0.5] * 4, 10)])["gap"], 0.0)
    assert lookup.dominant_period([0.5] * 4) is None


def test_dominant_period_names_the_stride_of_a_sharp_pattern():
    """One weak phase in every 4 has equal harmonics at periods 4 and 2: the period is 4."""
    one_weak = [0.0 if r % 4 == 3 else 1.0 for r in range(MODULUS)]
    spectrum = metrics.harmonic_spectrum(one_weak)
    assert spectrum[6] == pytest.approx(spectrum[12])  # the tie the strongest alone cannot break
    assert lookup.dominant_period(one_weak) == 4
    three_weak = [0.0 if r % 8 >= 5 else 1.0 for r in range(MODULUS)]
    assert lookup.dominant_period(three_weak) == 8
    assert lookup.dominant_period([0.2 + 0.1 * (r % 12 == 0) for r in range(MODULUS)]) == 12


# ----------------------------------------------------------------------------- the command line


def _run(capsys, *argv):
    from weakspots.cli import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("padding", lookup.PADDINGS)
def test_cli_prints_the_design(capsys, padding):
    import json

    code, out, _ = _run(
        capsys, "lm", "lookup", "--design-only", "--padding", padding, "--json",
        "--prompts-per-residue", "24",
    )  # fmt: skip
    assert code == 0
    printed = json.loads(out)
    rows = printed["prompts"]
    assert len(rows) == 24 * 24 and len({r["query_position"] for r in rows}) == 1
    again = lookup.design(padding)
    assert [(r["target_position"], r["residue"]) for r in rows] == [
        (p.target_position, p.residue) for p in again
    ]
    assert printed["statistics"]["variance_ratio"] <= 1.02


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--design-only", "--padding", "middle"], "--padding"),
        (["--design-only", "--modulus", "1"], "--modulus"),
        (["--design-only", "--prompts-per-residue", "0"], "--prompts-per-residue"),
        (["--design-only", "--length", "50"], "--length"),
        (["--design-only", "--batch", "0"], "--batch"),
        ([], "--checkpoint"),
        (["--checkpoint", "/no/such/dir"], "--checkpoint"),
    ],
)
def test_cli_bad_input_is_one_line_naming_the_flag(capsys, argv, flag):
    code, out, err = _run(capsys, "lm", "lookup", *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"error: {flag}" in err


def _tiny_run(directory, vocab, seeds=2):
    """A run directory of untrained tiny checkpoints (one per seed), as `lm pretrain` lays out."""
    import jax
    from flax import nnx

    from weakspots.idealized.pretrain.config import PretrainConfig
    from weakspots.idealized.pretrain.model import Backbone
    from weakspots.sims.pretrain import checkpoint

    base = PretrainConfig(vocab=vocab, d_model=16, layers=1, heads=2, kv_heads=1, head_dim=8,
                          mlp_hidden=32, seq_len=32)  # fmt: skip
    for seed in range(seeds):
        config = dataclasses.replace(base, seed=seed)
        model = Backbone(config, rngs=nnx.Rngs(params=jax.random.key(seed)))
        checkpoint.save_seed(directory, config, nnx.split(model)[1])
    checkpoint.write_json(
        directory / checkpoint.CONFIG, dataclasses.replace(base, seeds=seeds).asdict()
    )
    return directory


@pytest.mark.slow
def test_checkpoint_scorer_matches_the_models_full_logits(tmp_path, tokenizer):
    """The last position's logits, sliced on the device, equal those of `train.logits_fn`."""
    from weakspots.sims.pretrain import checkpoint, train

    run = _tiny_run(tmp_path / "run", tokenizer.vocab_size, seeds=1)
    (seed_dir,) = checkpoint.seed_checkpoints(run)
    prompts = lookup.design("prefix", modulus=4, prompts_per_residue=4)
    tokens = np.stack([p.tokens for p in prompts[:6]])
    config, last = lookup.checkpoint_scorer(seed_dir)
    full = train.logits_fn(*checkpoint.load(seed_dir))(tokens)
    assert config.seed == 0 and last(tokens).shape == (6, tokenizer.vocab_size)
    np.testing.assert_allclose(last(tokens), full[:, -1], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_cli_evaluates_a_run_directory_seed_by_seed(capsys, tmp_path, tokenizer):
    import json

    run = _tiny_run(tmp_path / "run", tokenizer.vocab_size)
    code, out, err = _run(capsys, "lm", "lookup", "--checkpoint", str(run), "--modulus", "4",
                          "--prompts-per-residue", "4", "--json", "--quiet")  # fmt: skip
    assert code == 0, err
    report = json.loads(out)
    assert report["seeds"] == 2 and np.shape(report["residue_accuracy"]) == (2, 4)
    assert report["checkpoints"] == [str(run / "seed-0"), str(run / "seed-1")]
    assert [c["seed"] for c in report["configs"]] == [0, 1] and report["padding"] == "prefix"
    assert "32-token sequences" in err  # the prompts are longer than its training sequences
    other = _tiny_run(tmp_path / "other", 100, seeds=1)
    code, out, err = _run(capsys, "lm", "lookup", "--checkpoint", str(other / "seed-0"))
    assert code == 2 and "error: --checkpoint" in err and "vocabulary of 100" in err


def test_cli_text_reports_read_their_numbers():
    from weakspots.cli import lookup as cli

    out = {"padding": "prefix", **lookup.report([_result([0.5, 1.0, 0.25, 1.0], 8)] * 2)}
    text = cli.report_text(out)
    assert "gap 0.750 (best residue 1, worst 2" in text and "dominant period 2" in text
    assert "mean accuracy 0.688" in text
    prompts = lookup.design("in-sequence", modulus=4, prompts_per_residue=4)
    args = argparse.Namespace(padding="in-sequence", modulus=4, prompts_per_residue=4, seed=0,
                              records=64, demonstrations=8)  # fmt: skip
    design = cli.design_text(cli.design_report(args, prompts))
    length = prompts[0].tokens.size
    assert f"16 prompts of {length} tokens" in design and f"query position [{length - 1}]" in design
