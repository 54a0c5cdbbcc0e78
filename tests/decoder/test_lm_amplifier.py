"""The amplifier study (`sims.experiments.decoder.amplifier.study`, experiments `lm_amplifier`, `lm_amplifier_profile`)."""

import argparse
import shlex

import pytest

from weakspots.cli import lm as lm_cli
from weakspots.idealized.decoder.config import LMConfig
from weakspots.sims.experiments.decoder.amplifier import lm_amplifier, lm_amplifier_profile
from weakspots.sims.experiments.decoder.amplifier import study as amplifier


@pytest.mark.parametrize("size", ["tiny", "quick", "full"])
def test_each_design_keeps_v4s_proportions_and_its_command_rebuilds_its_config(size):
    parser = argparse.ArgumentParser()
    lm_cli.add_lm_flags(parser)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    for arm, design, seq_len in amplifier.cells(size):
        config = amplifier.design_config(size, arm, design, seq_len)
        seeds = amplifier.seeds_of(size, design, arm)
        line = amplifier.command(config, seeds)
        args = parser.parse_args(shlex.split(line)[3:])
        assert lm_cli.lm_config(args) == config, line
        assert args.seeds == seeds
        if design not in ("no_local", "dense") and size != "tiny" and not arm.startswith("hca"):
            assert config.local_window >= 8 * config.stride  # V4's proportions (issue's rule)
        assert config.layer_kinds[0] == "swa"
        reference = amplifier.REFERENCE[arm]
        if design != reference:
            ref = amplifier.design_config(size, arm, reference, seq_len)
            changed = {
                f for f in LMConfig.__dataclass_fields__ if getattr(ref, f) != getattr(config, f)
            }
            assert changed and changed <= set(amplifier.AMPLIFIER_DESIGNS[design])  # one part off or on


def test_the_add_arm_is_v4s_csa_layer_with_every_part_off_and_each_addition_is_v4s_value():
    """`csa_add`'s base differs from V4's CSA design in exactly the parts `ADDITIONS` switch
    on (and K != V, 8 facts, 1000 steps), and each addition sets its part to V4's value."""
    v4 = amplifier.design_config("quick", "csa", "v4")
    base = amplifier.design_config("quick", "csa_add", "base")
    parts = {f for d in amplifier.ADDITIONS.values() for f in d}
    changed = {f for f in LMConfig.__dataclass_fields__ if getattr(v4, f) != getattr(base, f)}
    assert changed == parts | {"separate_values", "pairs", "steps"}
    assert base.separate_values and base.pairs == 8 and base.steps == 1000
    for design, fields in amplifier.ADDITIONS.items():
        config = amplifier.design_config("quick", "csa_add", design)
        assert {f: getattr(config, f) for f in fields} == {f: getattr(v4, f) for f in fields}
    for design in amplifier.ADD16_DESIGNS:  # the denser arm: the same designs at 16 facts
        dense16 = amplifier.design_config("quick", "csa_add16", design)
        assert dense16 == amplifier.design_config("quick", "csa_add", design).replace(pairs=16)
    for design in amplifier.ADD20_DESIGNS:  # 20 facts, each seed on 64 sequences per position
        at20 = amplifier.design_config("quick", "csa_add20", design)
        at8 = amplifier.design_config("quick", "csa_add", design)
        assert at20 == at8.replace(pairs=20, eval_samples=64)


def test_the_quick_study_reads_its_recorded_reports_and_rows_are_typed():
    results = lm_amplifier.run("quick")
    designs = {(c["arm"], c["design"]) for c in results["cells"]}
    assert designs == {(arm, design) for arm, design, _ in amplifier.cells("quick")}
    assert {d for a, d in designs if a == "csa"} == set(amplifier.SIZES["quick"]["designs"])
    for c in results["cells"]:
        assert c["seeds"] == amplifier.seeds_of("quick", c["design"], c["arm"])
        lo, hi = c["delta_max_ci"]
        assert lo <= c["delta_max"] <= hi
    rows = lm_amplifier.rows(results, lm_amplifier.predict("quick", results))
    dense = [r for r in rows if "dense control" in r.name]
    assert len(dense) == 6 and not any(r.finding for r in dense)  # one per arm
    assert all(r.finding for r in rows if r not in dense and r.kind != "fit")
    assert [r.kind for r in rows].count("fit") == 2  # the allocation law: CSA's v4, csa_add's base
    arms_of = lambda d: {c["arm"] for c in results["cells"] if c["design"] == d}  # noqa: E731
    for design, others in amplifier.COMPARED_WITH.items():  # the comparisons beyond the reference
        for other in others:
            both = len(arms_of(design) & arms_of(other))  # one row per arm with both designs
            assert both >= 1
            gap = f"amplifier study: {design} in training moves delta_max from {other}'s"
            halves = f"{design} in training changes how much a fact's read needs the current half"
            assert sum(r.name == gap for r in rows) == both
            assert sum(r.name.startswith(f"amplifier study: {halves}") and f"from {other}'s"
                       in r.name for r in rows) == both  # fmt: skip
    profiles = lm_amplifier_profile.run("quick")["profiles"]
    arms = ["csa", "hca", "csa_add", "csa_add16", "csa_add20", "hca_add"]
    assert [p["arm"] for p in profiles] == arms
    for p in profiles:
        shown = [c["design"] for c in p["designs"]]
        assert shown[:2] == [amplifier.REFERENCE[p["arm"]], "dense"]
        assert len(shown) == (2 if p["arm"].startswith("hca") else 3)  # hca: no ablation recorded


def test_a_recorded_report_of_another_config_is_refused(monkeypatch):
    config = amplifier.design_config("quick", "csa", "v4").replace(steps=7)
    with pytest.raises(ValueError, match="another config"):
        amplifier.recorded("csa", "v4", config)


@pytest.mark.slow
def test_the_tiny_study_trains_measures_and_draws(tmp_path, monkeypatch):
    monkeypatch.setenv("WEAKSPOTS_LM_CACHE", str(tmp_path))
    amplifier.run.cache_clear()
    results = lm_amplifier.run("tiny")
    assert {c["design"] for c in results["cells"]} == {"v4", "no_topk", "dense"}
    for c in results["cells"]:
        assert set(c["drops"]) >= {"hide_direct", "cut_local"}
    rows = lm_amplifier.rows(results, lm_amplifier.predict("tiny", results))
    assert rows and all(r.kind in ("prediction", "fit") for r in rows)


def test_the_halves_row_compares_the_one_window_phases_and_needs_the_same_key_length():
    """`hide_direct_current`'s drops averaged over the phases whose fact lies in one window
    (value phase >= key_len), intervals combined over those phases; phase 0 (a straddling
    fact) left out; no row without the test or between key lengths."""

    def cell(drops, half_width, key_len=1):
        return {"key_len": key_len, "phase_accuracy": [0.9] * 4,
                "phase_drops": {"hide_direct_current": drops},
                "phase_drops_ci": {"hide_direct_current": [[d - half_width, d + half_width]
                                                           for d in drops]}}  # fmt: skip

    base = cell([0.9, 0.3, 0.1, 0.0], 0.03)
    mean, se = lm_amplifier._current_half_drop(base)
    assert mean == pytest.approx(0.4 / 3)
    assert se == pytest.approx((0.03 / 1.959964) * 3**0.5 / 3)
    apart = lm_amplifier._halves_row(
        "w", "with_topk", cell([0.7, 0.0, 0.0, 0.0], 0.01), "base", base
    )
    assert apart.holds and apart.finding
    close = lm_amplifier._halves_row("w", "x", cell([0.0, 0.3, 0.1, 0.02], 0.03), "base", base)
    assert not close.holds
    assert (
        lm_amplifier._halves_row("w", "k2", cell([0.0] * 4, 0.01, key_len=2), "base", base) is None
    )
    no_test = {**base, "phase_drops": {"hide_direct_current": None}}
    assert lm_amplifier._halves_row("w", "hca", no_test, "base", base) is None
