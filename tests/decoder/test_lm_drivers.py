"""The paper-figure drivers of the decoder family and the decoder benchmark, at tiny size (slow)."""

import json

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from weakspots.figures import lm_family, lm_position  # noqa: E402
from weakspots.sims.experiments.decoder.family import study as family  # noqa: E402
from weakspots.sims.experiments.decoder.position import lm_position as position  # noqa: E402


@pytest.mark.slow
def test_position_driver_gives_json_results_the_figure_draws():
    results = position.run(position.SIZES["tiny"])
    json.dumps(results)
    assert set(results["designs"]) == {"compressed", "dense"}
    assert results["designs"]["dense"]["config"]["operator"] == "none"
    lm_position.make(results, None)


@pytest.mark.slow
def test_family_driver_gives_one_row_per_cell():
    results = family.run("tiny")
    json.dumps(results)
    cells = {(r["operator"], r["stride"], r["seq_len"]) for r in results["rows"]}
    assert cells == set(family.cells("tiny"))
    lm_family.make(results, None)


@pytest.mark.slow
def test_lm_throughput_reports_both_ratios():
    from weakspots.benchmarks import lm_throughput

    settings = lm_throughput.LMBenchSettings(runs=2, steps=2, repeats=1, matmuls=1)
    result = lm_throughput.run(settings)
    for name in lm_throughput.TARGETS:
        assert result[name] > 0 and name in result["targets"]
    # XLA counts elementwise work too: at least the matmuls of the forward and backward
    assert result["xla_flops_per_step"] >= 0.9 * result["model_flops_per_step"]
    # the wide V4 decoder: every width 8x, so its projections' FLOPs grow ~64x
    assert result["wide_v4_config"]["d_model"] == 8 * result["v4_config"]["d_model"]
    assert result["wide_v4_flop_utilisation"] > 0
    assert result["wide_v4_model_flops_per_step"] > 30 * result["v4_model_flops_per_step"]
