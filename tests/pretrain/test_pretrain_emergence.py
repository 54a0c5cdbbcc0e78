"""Emergence during pretraining and the recipe's knobs: the sized tokenizer, Zipfian words, the
constant schedule, the lookup sized to a context, copy accuracy against a second computation."""

import json

import numpy as np
import pytest

from weakspots.idealized.pretrain import corpus
from weakspots.idealized.pretrain.config import PretrainConfig
from weakspots.idealized.pretrain.tokenizer import OPEN_CLASSES, Tokenizer
from weakspots.sims.pretrain import emergence, lookup
from weakspots.sims.pretrain.train import Hyper, learning_rate, logits_fn, merge, pretrain

TINY = PretrainConfig(d_model=16, layers=1, heads=2, kv_heads=1, head_dim=8, mlp_hidden=16,
                      seq_len=112, batch=2, steps=4, warmup=1, log_every=2, val_batches=1,
                      emergence_every=2, open_words=40)  # fmt: skip


def test_sized_tokenizer_keeps_every_id_below_the_open_classes():
    default, small = Tokenizer.default(), Tokenizer.sized(40)
    assert Tokenizer.sized(0) is default
    assert small.vocab_size == default.vocab_size - sum(OPEN_CLASSES.values()) + 4 * 40
    for name in ("special", "function", "animal", "name", "number"):
        assert small.classes[name] == default.classes[name]
    for name in OPEN_CLASSES:
        words = [small.words[i] for i in small.classes[name]]
        assert words == [default.words[i] for i in default.classes[name]][:40]
    with pytest.raises(ValueError, match="--open-words"):
        Tokenizer.sized(-1)


def test_zipf_changes_only_which_open_word_is_drawn():
    """The same random numbers: every token outside the open classes and the numbers is where
    it was, and the drawn words follow P(rank i) ~ (i + 1)^-a (rank 1 against rank 2: 2^a)."""
    tokenizer = Tokenizer.default()
    uniform = corpus.batch_at(tokenizer, 3, 0, 64, 256)
    zipf = corpus.batch_at(tokenizer, 3, 0, 64, 256, zipf=1.0)
    open_ids = np.concatenate([tokenizer.class_ids(n) for n in (*OPEN_CLASSES, "number")])
    closed = ~np.isin(uniform, open_ids)
    np.testing.assert_array_equal(closed, ~np.isin(zipf, open_ids))
    np.testing.assert_array_equal(uniform[closed], zipf[closed])
    assert not np.array_equal(uniform, zipf)


@pytest.mark.parametrize("exponent", [0.0, 1.0, 1.5])
def test_drawn_words_follow_the_zipf_law(exponent):
    """200,000 draws against P(rank i) = (i + 1)^-a / H: the chi-square of the first 20 ranks
    and the tail below its 0.01% critical value (54.0 at 21 degrees of freedom; a rank off by
    one gives thousands). Seed 0 at a = 1 draws 45.9 (p = 0.0014); seeds 1-9 give 14-23."""
    ids = np.arange(100, 700)
    drawn = corpus.draw_words(np.random.default_rng(0), ids, 200_000, exponent) - 100
    weights = np.arange(1, 601, dtype=float) ** -exponent
    p = weights / weights.sum()
    observed = np.append(np.bincount(drawn, minlength=600)[:20], np.sum(drawn >= 20))
    expected = 200_000 * np.append(p[:20], p[20:].sum())
    chi2 = np.sum((observed - expected) ** 2 / expected)
    assert chi2 < 54.0
    assert (corpus.word_cdf(600, exponent) is None) == (exponent == 0)


def test_constant_schedule_holds_the_peak_after_warmup():
    config = TINY.replace(steps=100, warmup=4, lr=2e-3, schedule="constant")
    hyper = Hyper.of(config)
    rates = [float(learning_rate(config, hyper, np.int32(s))[0]) for s in (0, 3, 50, 99)]
    assert rates == pytest.approx([0.5e-3, 2e-3, 2e-3, 2e-3])


@pytest.mark.parametrize("shape", emergence.PROBE_LADDER)
def test_probe_shapes_keep_the_lookups_guarantees(shape):
    """Every rung: one query position, the target beyond the local window, equal means and
    variances within the lattice's granularity by residue, and the paddings share targets."""
    prompts = {p: shape.design(p) for p in lookup.PADDINGS}
    stats = lookup.design_statistics(prompts["prefix"], emergence.PROBE_MODULUS)
    assert len(stats["query_positions"]) == 1 and stats["local_window_clear"]
    assert stats["mean_range"] <= lookup.MEAN_TOLERANCE
    assert stats["variance_ratio"] < 1.1
    first = [(p.target_position, p.answer) for p in prompts["prefix"]]
    assert first == [(p.target_position, p.answer) for p in prompts["in-sequence"]]
    for p in prompts["in-sequence"]:
        records = p.tokens[: p.query_position - 2 * shape.demonstrations]
        assert np.isin(records, Tokenizer.default().key_ids).sum() == shape.records
        assert p.tokens[p.target_position + 1] == p.answer


def test_probe_shape_is_the_largest_that_fits():
    assert emergence.probe_shape(372) == emergence.PROBE_LADDER[0]
    shape = emergence.probe_shape(128)
    assert len(shape.design("prefix")[0].tokens) <= 128
    longer = emergence.PROBE_LADDER[emergence.PROBE_LADDER.index(shape) - 1]
    assert len(longer.design("prefix")[0].tokens) > 128
    with pytest.raises(ValueError, match="--seq-len"):
        emergence.probe_shape(40)


def test_repeated_pairs_marks_second_mentions_only():
    tok = Tokenizer.default()
    row = tok.encode("<doc> the fox carol met the owl bob . the fox carol and owl bob . fox dave")
    marked = emergence.repeated_pairs(np.array([row]), tok)[0]
    assert [tok.words[row[t]] for t in np.flatnonzero(marked)] == ["fox", "owl"]
    assert np.flatnonzero(marked).tolist() == [10, 13]


def test_measure_agrees_with_scoring_each_seed_on_its_own(tmp_path):
    """Copy and lookup accuracy of the vmapped measurement against each seed's logits
    computed one seed at a time (`train.logits_fn`) and scored in numpy."""
    config = TINY.replace(seeds=2, vocab=Tokenizer.sized(40).vocab_size)
    history = pretrain(config, out_dir=tmp_path)
    assert history.emergence_steps == [0, 2, 4]
    assert history.emergence_tokens == [0, 2 * 2 * 112, 4 * 2 * 112]
    stored = json.loads((tmp_path / "history.json").read_text())
    assert stored["copy_accuracy"] == history.copy_accuracy
    assert stored["emergence_probe"]["probe"]["length"] <= 112
    probe = emergence.Emergence(config, Tokenizer.sized(40))
    from weakspots.sims.pretrain import checkpoint

    for r, directory in enumerate(checkpoint.seed_checkpoints(tmp_path)):
        seed_config, params = checkpoint.load(directory)
        logits = logits_fn(seed_config, params)
        predicted = np.argmax(logits(probe.copy_inputs), -1)
        copy = np.mean(predicted[probe.copy_mask] == probe.copy_targets[probe.copy_mask])
        assert history.copy_accuracy[-1][r] == pytest.approx(copy)
        prompts = probe.prompts["in-sequence"]
        last = np.argmax(logits(np.stack([p.tokens for p in prompts]))[:, -1], -1)
        expected = np.mean(last == [p.answer for p in prompts])
        assert history.lookup_in_sequence[-1][r] == pytest.approx(expected)
        assert merge(seed_config, params).config.vocab == config.vocab


def test_law_tokens():
    assert emergence.induction_law_tokens(32, 512) == pytest.approx(10**5.7 * 128)
    assert emergence.induction_law_tokens(4, 128) / 1e6 == pytest.approx(11.34, abs=0.01)


def test_recipe_commands_parse_back_to_their_configs():
    from weakspots.cli import build_parser
    from weakspots.cli.pretrain import pretrain_config
    from weakspots.sims.experiments.pretrain import recipes

    parser = build_parser(("lm",))
    for name in recipes.RECIPES:
        argv = recipes.command(name, "runs/x").split()[1:]
        assert pretrain_config(parser.parse_args(argv)) == recipes.recipe_config(name)


def test_crossing_interpolates_the_mean_over_seeds():
    from weakspots.sims.experiments.pretrain.emergence import crossing

    tokens = [0, 100, 200, 300]
    accuracy = [[0.0, 0.0], [0.2, 0.4], [0.6, 0.8], [0.9, 0.9]]  # means 0, 0.3, 0.7, 0.9
    assert crossing(tokens, accuracy) == pytest.approx(150.0)
    assert crossing(tokens, accuracy, threshold=0.95) is None
    assert crossing(tokens, [[0.6, 0.6]] + accuracy[1:]) == 0.0


def test_a_recorded_run_directory_reads_back_as_the_experiment_reads_it(tmp_path):
    from weakspots.sims.experiments.pretrain import emergence as experiment
    from weakspots.sims.experiments.pretrain import recipes

    config = TINY.replace(emergence_every=4)
    pretrain(config, out_dir=tmp_path / "tiny")
    entry = recipes.entry("tiny", tmp_path / "tiny", "test machine")
    assert entry["tokens"] == [0, 4 * 2 * 112] and len(entry["copy_accuracy"]) == 2
    assert entry["law_tokens"] == pytest.approx(emergence.induction_law_tokens(2, 112))
    summary = experiment.summarise(json.loads(json.dumps(entry)))
    assert summary["copy"]["final"] == pytest.approx(np.mean(entry["copy_accuracy"][-1]))


def test_synthetic_induction_rows_repeat_and_variants_parse():
    from weakspots.benchmarks import synthetic_induction as bench

    rows = next(bench.repeats(1, 3, 128, 0))
    half = (128 + 1) // 2 + 1
    np.testing.assert_array_equal(rows[:, half : 2 * half][:, : 129 - half], rows[:, : 129 - half])
    assert rows.min() >= 3 and rows.max() < bench.VOCAB
    config = bench.variant_config("qk_norm=0,lr=0.001", 100)
    assert config.qk_norm is False and config.lr == 1e-3 and config.steps == 100
    assert bench.variant_config("base", 10) == PretrainConfig(**bench.BASE, steps=10)


@pytest.mark.slow
def test_synthetic_induction_runs_and_scores(tmp_path):
    from weakspots.benchmarks import synthetic_induction as bench

    out = tmp_path / "rows.json"
    assert (
        bench.main(["--variants", "lr=0.001", "--steps", "4", "--every", "2", "--json", str(out)])
        == 0
    )
    result = json.loads(out.read_text())["results"][0]
    assert [r["step"] for r in result["rows"]] == [2, 4]
    assert all(0.0 <= r["copy_accuracy"] <= 1.0 for r in result["rows"])


def test_earlier_names_count_distinct_names_up_to_each_position():
    tok = Tokenizer.default()
    row = tok.encode("<doc> the fox carol met the owl bob . carol and the fox carol")
    counts = emergence.earlier_names(np.array([row]), tok)[0]
    # positions 0..T-2; carol at 3, bob at 7, carol again at 9 and 13
    assert counts.tolist() == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2]


def test_rescoring_the_last_checkpoint_repeats_the_last_measurement(tmp_path):
    config = TINY.replace(seeds=2, emergence_every=4, checkpoint_every=2)
    history = pretrain(config, out_dir=tmp_path, keep_checkpoints=True)
    scores = emergence.rescore(tmp_path, config.replace(vocab=Tokenizer.sized(40).vocab_size),
                               Tokenizer.sized(40))  # fmt: skip
    assert scores["steps"] == [2, 4]
    assert scores["copy_accuracy_contested"][-1] == history.copy_accuracy_contested[-1]
    assert scores["lookup_prefix"][-1] == history.lookup_prefix[-1]


def test_a_constant_rate_run_extends_bit_for_bit(tmp_path):
    """Asked for more steps, a constant-rate run continues where it stopped and ends with the
    parameters of a run asked for those steps from the start; a cosine run is refused."""
    config = TINY.replace(schedule="constant", steps=4, emergence_every=0, checkpoint_every=2)
    pretrain(config, out_dir=tmp_path / "short")
    longer = pretrain(config.replace(steps=6), out_dir=tmp_path / "short")
    whole = pretrain(config.replace(steps=6), out_dir=tmp_path / "whole")
    assert longer.loss == whole.loss and longer.steps[-1] == 6
    with (
        np.load(tmp_path / "short" / "state.npz") as a,
        np.load(tmp_path / "whole" / "state.npz") as b,
    ):
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key])
    cosine = config.replace(schedule="cosine")
    pretrain(cosine, out_dir=tmp_path / "cosine")
    with pytest.raises(ValueError, match="steps differ"):
        pretrain(cosine.replace(steps=6), out_dir=tmp_path / "cosine")


def test_copy_sources_point_at_the_latest_earlier_key():
    tok = Tokenizer.default()
    row = tok.encode("<doc> the fox carol met the owl bob . the fox carol and owl bob . fox carol")
    tokens = np.array([row])
    sources = emergence.copy_sources(tokens, tok)[0]
    assert np.array_equal(sources >= 0, emergence.repeated_pairs(tokens, tok)[0])
    # fox at 2, owl at 6, fox again at 10 and 16, owl again at 13
    assert {int(t): int(sources[t]) for t in np.flatnonzero(sources >= 0)} == {10: 2, 13: 6, 16: 10}


def _synthetic_copies(weak_residue, rng, rows=240, per_row=30, length=384, seeds=2):
    """Copy positions at random earlier keys; correct with probability 0.7, or 0.3 where the
    key's residue mod 8 is `weak_residue` (None: no weak residue)."""
    sources = np.full((rows, length - 1), -1)
    hits = np.zeros((seeds, rows, length - 1), dtype=bool)
    for r in range(rows):
        where = rng.choice(np.arange(200, length - 1), per_row, replace=False)
        sources[r, where] = rng.integers(16, 200, per_row)
        rate = np.where(sources[r, where] % 8 == weak_residue, 0.3, 0.7)
        hits[:, r, where] = rng.random((seeds, per_row)) < rate
    return hits, sources


def test_copy_phase_profile_finds_a_planted_weak_residue_and_not_a_flat_one():
    rng = np.random.default_rng(3)
    hits, sources = _synthetic_copies(3, rng)
    out = emergence.copy_phase_profile(hits, sources, 8, resamples=500)
    # pooled accuracy against a loop over positions
    rows, cols = np.nonzero(sources >= 0)
    for r in range(8):
        at = sources[rows, cols] % 8 == r
        assert out["residue_accuracy"][r] == pytest.approx(hits[:, rows[at], cols[at]].mean())
    assert out["positions"] == rows.size and sum(out["residue_counts"]) == rows.size
    assert out["worst_residue"] == 3 and out["delta_max_p"] < 0.01
    lo, hi = out["delta_max_interval"]
    assert lo < 0.4 < hi + 0.05  # the planted gap, 0.7 - 0.3, less sampling noise
    for r, (a, b) in enumerate(out["residue_interval"]):
        assert a <= out["residue_accuracy"][r] <= b
    flat = emergence.copy_phase_profile(*_synthetic_copies(None, rng), 8, resamples=500)
    assert flat["delta_max_p"] > 0.05 and flat["delta_max"] < 0.1


def test_lm_copy_scores_a_run_as_its_seeds_do_one_at_a_time(tmp_path, capsys):
    """`weakspots lm copy` on a tiny run against each seed's logits (`train.logits_fn`) and
    residues counted in numpy; bad input refused in one line."""
    from weakspots.cli import main
    from weakspots.sims.pretrain import checkpoint

    config = TINY.replace(seeds=2, vocab=Tokenizer.sized(40).vocab_size)
    pretrain(config, out_dir=tmp_path)
    assert main(["lm", "copy", "--checkpoint", str(tmp_path), "--rows", "64", "--modulus", "4",
                 "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    tok = Tokenizer.sized(40)
    held = corpus.batch_at(tok, corpus.VALIDATION_SEED, emergence.COPY_STEP, 64, 112)
    sources = emergence.copy_sources(held, tok)
    keep = sources >= emergence.PHASE_START
    for seed, directory in enumerate(checkpoint.seed_checkpoints(tmp_path)):
        seed_config, params = checkpoint.load(directory)
        predicted = np.argmax(logits_fn(seed_config, params)(held[:, :-1]), -1)
        right = (predicted == held[:, 1:])[keep]
        residue = sources[keep] % 4
        expected = [right[residue == r].mean() for r in range(4)]
        assert out["copy"]["seed_residue_accuracy"][seed] == pytest.approx(expected)
    assert out["start"] == emergence.PHASE_START and out["seeds"] == 2
    assert main(["lm", "copy", "--checkpoint", str(tmp_path), "--rows", "60"]) == 2
    assert "--rows" in capsys.readouterr().err
