"""The pretraining loop: schedule, resuming bit for bit, checkpoints, loss going down."""

import json

import numpy as np
import pytest

from weakspots.idealized.pretrain.config import PretrainConfig
from weakspots.sims.pretrain import checkpoint
from weakspots.sims.pretrain.train import Hyper, learning_rate, logits_fn, pretrain

TINY = PretrainConfig(vocab=16, d_model=16, layers=1, heads=2, kv_heads=1, head_dim=8,
                      mlp_hidden=16, seq_len=16, batch=4, steps=12, warmup=2, lr=1e-2,
                      log_every=3, checkpoint_every=6, val_batches=1, attention="compressed",
                      window=4, stride=2, local_window=4)  # fmt: skip


def counting(seed: int, batch: int, length: int, start: int):
    """Rows that count up by one (mod 16) from a random start: next token = this one + 1."""
    step = start
    while True:
        rng = np.random.default_rng([seed, step])
        first = rng.integers(0, 16, (batch, 1))
        yield ((first + np.arange(length + 1)[None]) % 16).astype(np.int32)
        step += 1


def test_learning_rate_schedule():
    config = TINY.replace(steps=102, warmup=2)
    hyper = Hyper.of(config)
    lr = lambda s: float(learning_rate(config, hyper, np.int32(s))[0])  # noqa: E731
    assert lr(0) == pytest.approx(0.5e-2) and lr(1) == pytest.approx(1e-2)
    assert lr(2) == pytest.approx(1e-2)
    assert lr(52) == pytest.approx(1e-2 * (0.1 + 0.9 * 0.5), rel=1e-6)  # half way: cos = 0
    assert lr(102) == pytest.approx(1e-3, rel=1e-6)


def test_resumed_run_equals_uninterrupted_bit_for_bit(tmp_path):
    whole = pretrain(TINY, out_dir=tmp_path / "whole", data=counting)
    part = pretrain(TINY, out_dir=tmp_path / "part", data=counting, stop_after=6)
    assert part.steps[-1] == 6
    resumed = pretrain(TINY, out_dir=tmp_path / "part", data=counting)
    assert resumed.loss == whole.loss and resumed.val_loss == whole.val_loss
    with (
        np.load(tmp_path / "whole" / "state.npz") as a,
        np.load(tmp_path / "part" / "state.npz") as b,
    ):
        assert a.files == b.files
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.slow
def test_loss_decreases_and_checkpoints_load(tmp_path):
    config = TINY.replace(steps=30, seeds=2, checkpoint_every=0, log_every=5)
    history = pretrain(config, out_dir=tmp_path, data=counting)
    loss = np.asarray(history.loss)  # (blocks, seeds)
    assert loss.shape == (6, 2)
    assert np.all(loss[-1] < 0.5 * loss[0])  # from about log 16 = 2.77
    stored = json.loads((tmp_path / "history.json").read_text())
    assert stored["loss"] == history.loss
    dirs = checkpoint.seed_checkpoints(tmp_path)
    assert [d.name for d in dirs] == ["seed-0", "seed-1"]
    seed_config, params = checkpoint.load(dirs[1])
    assert seed_config == config.for_seed(1)
    tokens = next(counting(5, 2, 16, 0))[:, :-1]
    logits = logits_fn(seed_config, params)(tokens)
    assert logits.shape == (2, 16, 16)
    accuracy = np.mean(np.argmax(logits[:, 4:], -1) == (tokens[:, 4:] + 1) % 16)
    assert accuracy > 0.9


def test_resume_refuses_another_config(tmp_path):
    checkpoint.write_json(tmp_path / "config.json", TINY.asdict())
    (tmp_path / "state.npz").touch()
    with pytest.raises(ValueError, match="lr differ"):
        pretrain(TINY.replace(lr=0.5), out_dir=tmp_path, data=counting)


@pytest.mark.parametrize("size", ["h200", "cpu", "smoke"])
def test_sweep_commands_parse_back_to_their_configs(size):
    """Each recorded `weakspots lm pretrain` command names exactly its design's config."""
    from weakspots.cli import build_parser
    from weakspots.cli.pretrain import pretrain_config
    from weakspots.sims.experiments.pretrain import sweep

    parser = build_parser(("lm",))
    for design in sweep.PRETRAIN_DESIGNS:
        argv = sweep.pretrain_argv(design, size, 300, "runs/x")
        assert pretrain_config(parser.parse_args(argv)) == sweep.config(design, size, 300)


def test_sweep_steps_share_the_device_and_record_picks_the_largest_gap(tmp_path):
    from weakspots.sims.experiments.pretrain import sweep

    assert sweep.shared_step_seconds({"a": 10.0, "b": 5.0}) == pytest.approx(0.3)

    def run(gap, beyond):
        report = {"gap": gap, "gap_beyond_intervals": beyond, "prompts_per_residue": 24,
                  "residue_accuracy": [[0.5] * 24], "checkpoints": ["/tmp/x"]}  # fmt: skip
        return {
            "history": {},
            "pretrain": {"out": "/tmp/x"},
            "prefix": report,
            "in-sequence": report,
        }

    summary = {"size": "smoke", "steps": 4, "runs": {
        "full_1kv": run(0.02, False), "w8s8_1kv": run(0.4, False), "w8s4_1kv": run(0.3, True)}}  # fmt: skip
    sweep.record(summary, tmp_path, "test machine")
    paper = json.loads((tmp_path / "paper_lookup.json").read_text())
    assert paper["design"] == "w8s4_1kv" and paper["control"] == "full_1kv"  # beyond noise first
    assert paper["result"]["gap"] == 0.3 and "checkpoints" not in paper["result"]
    assert "runs/pretrain/w8s4_1kv" in paper["command"] and "--stride 4" in paper["command"]


@pytest.mark.parametrize(
    ("flags", "named"),
    [(["--kv-heads", "3"], "--kv-heads"), (["--stride", "9"], "--stride"),
     (["--attention", "sparse"], "--attention"), (["--checkpoint-every", "7"], "--checkpoint-every")],
)  # fmt: skip
def test_cli_bad_flag_is_one_line_and_exit_2(tmp_path, capsys, flags, named):
    from weakspots.cli import main

    assert main(["lm", "pretrain", "--out", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err


@pytest.mark.slow
def test_cli_pretrains_on_the_corpus_and_reports(tmp_path, capsys):
    from weakspots.cli import main

    flags = ["lm", "pretrain", "--out", str(tmp_path), "--d-model", "16", "--layers", "1",
             "--heads", "2", "--head-dim", "8", "--mlp-hidden", "16", "--seq-len", "32",
             "--batch", "2", "--steps", "4", "--log-every", "2", "--attention", "compressed",
             "--seeds", "2", "--json", "--quiet"]  # fmt: skip
    assert main(flags) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["config"]["vocab"] > 100 and len(report["final_loss"]) == 2
    assert [p.split("/")[-1] for p in report["checkpoints"]] == ["seed-0", "seed-1"]
