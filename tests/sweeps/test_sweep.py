"""sims.sweep: the spec, slicing, batching, and sweep numbers against single runs."""

import numpy as np
import pytest

from weakspots.idealized.toy.config import FlowConfig, TrainConfig
from weakspots.sims import store, sweep
from weakspots.sims.toy.flow import solve
from weakspots.sims.toy.train import train

TINY = dict(stride=4, chunks=8, dim=8, steps=20, eval_every=10, eval_samples=64, batch=32, lr=0.5)


def test_grid_is_the_cartesian_product_with_typed_values():
    spec = sweep.parse_spec({"fixed": TINY, "grid": {"gain": [8, 16], "seed": [0, 1, 2]}})
    runs = spec.runs()
    assert len(runs) == 6 and {r.kind for r in runs} == {"train"}
    assert [(r.config.gain, r.config.seed) for r in runs[:3]] == [(8.0, 0), (8.0, 1), (8.0, 2)]
    assert all(isinstance(r.config.gain, float) for r in runs)  # TOML 8 -> 8.0, one hash
    assert runs[0].hash == store.config_hash(
        {**TrainConfig(**TINY, gain=8.0).__dict__, "kind": "train"}
    )
    assert len({r.hash for r in runs}) == 6


def test_duplicate_grid_points_run_once():
    spec = sweep.parse_spec({"fixed": TINY, "grid": {"seed": [1, 1, 2]}})
    assert [r.config.seed for r in spec.runs()] == [1, 2]


def test_unknown_key_is_named_with_the_valid_ones():
    with pytest.raises(sweep.SpecError, match="unknown key 'strde' in \\[grid\\].*stride, chunks"):
        sweep.parse_spec({"grid": {"strde": [4]}})
    with pytest.raises(sweep.SpecError, match="unknown key 't_end'.*kind = 'train'"):
        sweep.parse_spec({"fixed": {"t_end": 3.0}})
    with pytest.raises(sweep.SpecError, match="unknown top-level key 'stride'"):
        sweep.parse_spec({"stride": 4})
    with pytest.raises(sweep.SpecError, match="non-empty list"):
        sweep.parse_spec({"grid": {"seed": 3}})
    with pytest.raises(sweep.SpecError, match=r"^spec: stride \(\[grid\]\): .*got 0"):
        sweep.parse_spec({"grid": {"stride": [0]}}).runs()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"fixed": {"learn_gain": 1}}, r"learn_gain \(\[fixed\]\): must be true or false, got 1"),
        ({"grid": {"learn_projections": ["yes"]}}, "learn_projections.*true or false, got 'yes'"),
        ({"fixed": {"rank": 8}}, "rank.*applies only to --operator low_rank.*got 8"),
        ({"grid": {"operator": ["deepseek_v4"], "overlap": [True]}}, "overlap.*deepseek_v4"),
        ({"fixed": {"lr": 1e39}}, r"lr.*float32.*got 1e\+39"),
        ({"fixed": {"gain": float("nan")}}, "gain.*got nan"),
    ],
)
def test_spec_values_are_validated_as_the_flags_are(table, message):
    with pytest.raises(sweep.SpecError, match=message):
        sweep.parse_spec(table, "s.toml").runs()


def test_one_logical_run_has_one_hash():
    # Integers for float fields, negative zeros and the command line's floats all spell one
    # config: one hash, so a run is stored once.
    spellings = [
        {"gain": 16, "weight_decay": 0, "learn_gain": True},
        {"gain": 16.0, "weight_decay": -0.0, "learn_gain": True},
    ]
    hashes = {sweep.parse_spec({"fixed": f}).runs()[0].hash for f in spellings}
    from_flags = sweep.Run("train", TrainConfig(gain=float("16"), learn_gain=True))
    assert hashes == {from_flags.hash}


def test_a_binary_spec_is_named_not_valid_toml(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_bytes(bytes(range(256)))
    with pytest.raises(sweep.SpecError, match="not valid TOML"):
        sweep.load_spec(spec)


def test_flow_spec_accepts_flow_keys_and_dashes():
    fixed = {"t1": 50, "max-steps": 1000, "phase-entropy": 0}
    spec = sweep.parse_spec({"kind": "flow", "fixed": fixed, "grid": {"stride": [3, 4]}})
    runs = spec.runs()
    assert [r.config.stride for r in runs] == [3, 4] and runs[0].config.t1 == 50.0
    assert runs[0].config.max_steps == 1000 and runs[0].config.phase_entropy == 0.0
    assert runs[0].row["kind"] == "flow" and runs[0].bucket != runs[1].bucket
    assert isinstance(runs[0].config, FlowConfig)  # the one FlowConfig, as `weakspots flow`'s


def test_slices_partition_the_sweep():
    runs = sweep.parse_spec({"fixed": TINY, "grid": {"seed": list(range(7))}}).runs()
    shares = [sweep.select_slice(runs, i, 3) for i in range(3)]
    assert sorted(r.hash for s in shares for r in s) == sorted(r.hash for r in runs)
    assert [len(s) for s in shares] == [3, 2, 2]
    with pytest.raises(sweep.SpecError):
        sweep.select_slice(runs, 3, 3)


def test_batches_are_equal_and_bounded():
    assert sweep.batch_sizes(10, 2, 4) == [5, 5]  # both padded to 8: one shape per bucket
    assert sweep.batch_sizes(9, 1, 4) == [3, 3, 3]
    assert sum(sweep.batch_sizes(1000, 7, 3)) == 1000
    assert max(sweep.batch_sizes(1000, 7, 3)) <= 21


@pytest.mark.slow
def test_train_sweep_equals_runs_trained_alone(tmp_path):
    # Batched (2 runs + a padded one), the numbers equal each config trained by itself.
    spec = sweep.parse_spec({"fixed": TINY, "grid": {"gain": [8, 16], "seed": [0, 3]}})
    runs = spec.runs()[:3]
    report = sweep.run_sweep(runs, tmp_path, runs_per_device=2)
    assert (report.ran, report.buckets) == (3, 1)
    table = store.load(tmp_path).set_index("hash")
    for run in runs:
        alone = train(run.config).summary()
        row = table.loc[run.hash]
        assert row["seed"] == run.config.seed and row["kind"] == "train"
        np.testing.assert_allclose(row["phase_accuracy"], alone["phase_accuracy"], atol=1e-6)
        np.testing.assert_allclose(row["final_loss"], alone["final_loss"], rtol=1e-5)
        assert row["acc_0"] == row["phase_accuracy"][0]
        trajectory = store.load_trajectory(tmp_path, run.hash)
        assert trajectory["step_loss"].shape == (20,)
        assert trajectory["phase_accuracy"].shape == (3, 4)
    again = sweep.run_sweep(runs, tmp_path, resume=True)
    assert (again.ran, again.skipped) == (0, 3)


@pytest.mark.slow
def test_flow_sweep_equals_flows_solved_alone(tmp_path):
    fixed = {"chunks": 16, "init_scale": 0.05, "t1": 40.0, "saves": 5}
    runs = sweep.parse_spec(
        {"kind": "flow", "fixed": fixed, "grid": {"stride": [3], "gain": [6, 9], "seed": [2]}}
    ).runs()
    sweep.run_sweep(runs, tmp_path)
    table = store.load(tmp_path).set_index("hash")
    for run in runs:
        # alone: padded with copies of itself to the sweep's batch of 2 (the same program)
        ref = solve(run.config, batch_size=2).history
        row = table.loc[run.hash]
        np.testing.assert_allclose(row["final_loss"], float(ref.loss[-1]), rtol=1e-10)
        trajectory = store.load_trajectory(tmp_path, run.hash)
        np.testing.assert_allclose(trajectory["pooling_weights"], ref.pooling_weights, atol=1e-12)
        assert row["specialization_time"] == pytest.approx(float(ref.specialization_time))
        assert 0 < row["mean_accuracy"] < 1 and len(row["phase_accuracy"]) == 3


def test_a_failed_flow_is_stored_with_a_reason_and_no_metrics(tmp_path):
    # The run of tests/toy/test_flow.py's failure tests: max_steps is reached long before t1.
    fixed = {"stride": 4, "chunks": 8, "saves": 5, "max_steps": 64}
    runs = sweep.parse_spec({"kind": "flow", "fixed": fixed, "grid": {"t1": [1e12]}}).runs()
    report = sweep.run_sweep(runs, tmp_path)
    assert report.ran == 1
    row = store.load(tmp_path).iloc[0]
    assert "--max-steps 64" in row["failure"]
    assert "final_loss" not in row or np.isnan(row["final_loss"])
    assert runs[0].hash in store.completed_hashes(tmp_path)  # deterministic: not rerun


def test_a_diverged_run_is_stored_with_no_metrics_and_its_reason(tmp_path):
    # One structure (one compile): lr 1e38 blows the linear pooling weights up at once.
    fixed = {**{k: v for k, v in TINY.items() if k != "lr"}, "operator": "linear"}
    runs = sweep.parse_spec({"fixed": fixed, "grid": {"lr": [0.5, 1e38]}}).runs()
    report = sweep.run_sweep(runs, tmp_path)
    assert (report.ran, report.buckets) == (2, 1)
    table = store.load(tmp_path).set_index("lr")
    diverged, fine = table.loc[1e38], table.loc[0.5]
    assert diverged["diverged"] and diverged["failure"].startswith("training diverged: loss is")
    for metric in ("mean_accuracy", "delta_max", "psc", "final_loss"):
        assert np.isnan(diverged[metric]) and np.isfinite(fine[metric])
    assert not fine["diverged"]
    assert fine["failure"] is None or np.isnan(fine["failure"])
