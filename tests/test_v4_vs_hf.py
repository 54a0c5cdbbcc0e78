"""`benchmarks/v4_vs_hf`: the project's V4 layer and transformers' train the same thing.

At tiny sizes (no timing thresholds: machines are noisy): the run produces its keys; the
two sides' losses agree at step 0 within float32 rounding, and after one AdamW step they
agree far more closely than the step moved them (so the gradients and the optimizer
update agree too, not only the forward). Skipped without torch.
"""

import pytest

pytest.importorskip("torch", reason="needs the [hf] extra (torch)")
pytest.importorskip("transformers.models.deepseek_v4", reason="needs transformers >= 5.24 ([hf])")

from weakspots.benchmarks import bench, v4_vs_hf  # noqa: E402

LOSS_RTOL = 1e-5  # float32 means of T*D squares: rounding is ~1e-7 relative, a few ulps


@pytest.fixture(scope="module")
def tiny():
    return v4_vs_hf.run(v4_vs_hf.TINY)


def test_tiny_run_has_the_keys(tiny):
    for key in ("lm_vs_hf_step_speedup", "lm_vs_hf_compile_step_speedup", "hf_compile_error",
                "median_step_seconds", "sanity", "targets", "load_average"):  # fmt: skip
        assert key in tiny
    assert tiny["lm_vs_hf_step_speedup"] > 0
    assert set(tiny["median_step_seconds"]) == {"jax", "hf_eager"}
    assert tiny["targets"]["lm_vs_hf_step_speedup"]["target"] == 3.0


def test_losses_agree_at_step_zero_and_after_one_step(tiny):
    check = tiny["sanity"]
    assert len(check["losses"]["jax"][0]) == len(v4_vs_hf.KINDS)  # CSA and HCA both checked
    assert check["loss_step0_rel_diff"] <= LOSS_RTOL
    # The step moved the loss measurably, and both sides moved it alike.
    assert check["loss_step1_change"] > 100 * LOSS_RTOL
    assert check["loss_step1_rel_diff"] <= 0.01 * check["loss_step1_change"]


def test_bench_reports_a_skip_without_torch(monkeypatch):
    monkeypatch.setattr(v4_vs_hf, "available", lambda: "needs the [hf] extra (torch)")
    out = bench.bench_v4_vs_hf(bench.QUICK, lambda _: None)
    assert out["lm_vs_hf_step_speedup"] is None
    assert out["lm_vs_hf_skipped"] == "needs the [hf] extra (torch)"
    target = out["targets"]["lm_vs_hf_step_speedup"]
    assert target["met"] is False and target["value"] is None
