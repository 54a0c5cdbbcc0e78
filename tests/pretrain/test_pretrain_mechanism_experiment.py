"""The pretrain_mechanism experiment: recordings of `lm knockout`, `lm gates` and `lm cycle`
read from a directory, their rows on planted inputs with known answers, the paper's §4
numbers against PAPER.md's text, and the figure."""

import json
import math

import matplotlib
import numpy as np
import pytest

from weakspots.sims.experiments.pretrain import mechanism as mx
from weakspots.sims.pretrain import mechanism as measure

PROMPTS = 96


def _intact(profile, seeds=2):
    accuracy = np.stack([np.asarray(profile, dtype=float)] * seeds)
    return {"seeds": seeds, "modulus": accuracy.shape[1], "prompts_per_residue": PROMPTS,
            "residue_accuracy": accuracy.tolist(), "residue_mean": accuracy.mean(0).tolist(),
            "mean_accuracy": float(accuracy.mean())}  # fmt: skip


def _knockout(attention, profile, costs):
    """A knockout result of the verb's shape: one KV head per layer, `costs[layer]` the
    accuracy lost per residue (interval +-0.05 around it), then the duplicate whole layers."""
    modulus, layers = len(profile), len(costs)
    units = [
        {"unit": "head", "layer": i, "kv_head": 0, "query_heads": [0, 1]} for i in range(layers)
    ]
    units += [{"unit": "layer", "layer": i, "kv_head": None, "query_heads": [0, 1]}
              for i in range(layers)]  # fmt: skip
    change = -np.asarray([*costs, *costs], dtype=float)
    interval = np.stack([change - 0.05, change + 0.05], axis=-1)
    profile = np.asarray(profile, dtype=float)
    relative = [
        [None if p == 0 else c / p for c, p in zip(row, profile, strict=True)] for row in change
    ]
    return {"attention": attention, "units": units, "intact": _intact(profile),
            "change": change.tolist(), "change_interval": interval.tolist(),
            "relative_change": relative, "calibration_prompts": 8 * modulus,
            "evaluation_prompts": PROMPTS * modulus, "padding": "prefix"}  # fmt: skip


def _record(kind, design, result, **extra):
    return {"kind": kind, "design": design, "command": f"weakspots lm {kind} --json",
            "machine": "test", "steps": 1000, "result": result, **extra}  # fmt: skip


def _write(directory, name, record):
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.json").write_text(json.dumps(record))


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """An empty recordings directory the experiment reads (quick size)."""
    directory = tmp_path / "mechanism"
    monkeypatch.setattr(mx, "recordings_dir", lambda: directory)
    return directory


def _read():
    results = mx.run(mx.SIZES["quick"])
    return results, mx.rows(results, mx.predict(mx.SIZES["quick"], results))


def test_hurt_patterns_on_known_sets():
    all_ = range(8)
    assert mx.hurt_pattern(range(8), all_, 8) == mx.EVERY
    assert mx.hurt_pattern([4, 5], all_, 8) == mx.FEW
    assert mx.hurt_pattern([7, 0, 1], all_, 8) == mx.FEW  # a run across the window's end
    assert mx.hurt_pattern([1, 2, 3, 4, 5], all_, 8) == mx.OTHER  # more than S/2
    assert mx.hurt_pattern([1, 4], all_, 8) == mx.OTHER  # two runs
    assert mx.hurt_pattern([4, 5], [4, 5], 8) == mx.OTHER  # nothing else it could hurt
    assert mx.hurt_pattern([], all_, 8) == mx.NONE
    assert mx.cyclic_runs([0, 1, 7], 8) == 1 and mx.cyclic_runs([0, 2, 4], 8) == 3
    assert mx.alike([0.6, 0.5, 0.4]) and not mx.alike([0.6, 0.2, 0.5])


def test_knockouts_are_classified_as_planted(runs):
    """Full attention hurting every residue alike; W8/S8 hurting residues 4-5 alone (the
    lookup at modulus 8) and, at modulus 24, the residues of phases 4-5 alone."""
    flat = [0.8] * 24
    _write(runs, "full", _record("knockout", "full_1kv",
                                 _knockout("full", flat, [[0.6] * 24, [0.0] * 24])))  # fmt: skip
    eight = [0.0] * 8
    eight[4] = eight[5] = 0.7
    _write(runs, "w8s8_mod8", _record("knockout", "w8s8_1kv",
                                      _knockout("compressed", [0.7] * 8, [eight])))  # fmt: skip
    phased = [0.7 if r % 8 in (4, 5) else 0.0 for r in range(24)]
    costs = [[0.5] * 24, phased, [0.0] * 24]
    result = _knockout("compressed", [0.7] * 24, costs)
    _write(runs, "w8s8_mod24", _record("knockout", "w8s8_1kv", result, label="W8/S8, 1 KV, 24"))
    results, rows = _read()
    by_label = {}
    for e in results["knockout"]:
        by_label.setdefault(e["label"], []).append(e)
    (full,) = by_label["full attention, 1 KV"]
    assert full["period"] == 8  # the stride of the compressed designs beside it
    assert [u["name"] for u in full["units"]] == ["layer 0, KV 0", "layer 1, KV 0"]
    assert full["units"][0]["pattern"] == mx.EVERY and full["units"][0]["alike"]
    assert full["units"][1]["pattern"] == mx.NONE
    (mod8,) = by_label["W8/S8, 1 KV"]
    assert mod8["units"][0]["hurt_phases"] == [4, 5] and mod8["units"][0]["pattern"] == mx.FEW
    (mod24,) = by_label["W8/S8, 1 KV, 24"]
    assert [u["pattern"] for u in mod24["units"]] == [mx.EVERY, mx.FEW, mx.NONE]
    assert mod24["units"][1]["hurt_residues"] == [4, 5, 12, 13, 20, 21]
    (important,) = [r for r in rows if "most important unit" in r.name]
    assert important.passed and important.finding and "layer 0, KV 0" in important.config
    confined = [r for r in rows if "confined to a few adjacent phases" in r.name]
    assert len(confined) == 2 and all(r.passed for r in confined)
    distinct = [r for r in rows if "different phases" in r.name]
    assert len(distinct) == 2 and not any(r.passed for r in distinct)  # one selective unit each
    units = [r for r in rows if "one unit's significant hurt" in r.name]
    assert len(units) == 4 and all(r.passed for r in units)  # units that hurt nothing: no row
    table = mx.tables(results, mx.predict(mx.SIZES["quick"], results))[0]
    ours = {row[0]: row[7:] for row in table.rows}
    assert ours["full attention, 1 KV"] == ("layer 0, KV 0", "none", "none")
    assert ours["W8/S8, 1 KV"] == ("none", "layer 0, KV 0: 4-5", "none")
    assert ours["W8/S8, 1 KV, 24"] == ("layer 0, KV 0", "layer 1, KV 0: 4-5", "none")


def test_a_unit_at_the_only_phases_with_accuracy_is_not_called_selective(runs):
    """Its knockout could not have hurt any other phase: no verdict."""
    only = [0.7 if r % 8 in (4, 5) else 0.0 for r in range(24)]
    _write(runs, "w8s8", _record("knockout", "w8s8_1kv", _knockout("compressed", only, [only])))
    results, rows = _read()
    (unit,) = results["knockout"][0]["units"]
    assert unit["hurt_phases"] == [4, 5] and unit["pattern"] == mx.OTHER
    (confined,) = [r for r in rows if "confined" in r.name]
    assert not confined.passed


def _cycle(intact, cycled_by_delta, stride=8):
    """A cycle result of the verb's shape from per-seed residue accuracies `(R, M)`."""
    out = {"stride": stride, "boundary_phase": stride - 1, "deltas": {}, "padding": "prefix",
           "intact": _intact(intact[0], len(intact))}  # fmt: skip
    out["intact"]["residue_accuracy"] = np.asarray(intact).tolist()
    out["intact"]["residue_mean"] = np.mean(intact, axis=0).tolist()
    for delta, cycled in cycled_by_delta.items():
        fits = [measure.cycle_fit(a, b, delta, stride) for a, b in zip(intact, cycled, strict=True)]
        entry = {"report": {"residue_mean": np.mean(cycled, axis=0).tolist()}, "seeds": fits}
        for key in ("r_squared", "r_squared_without_boundary", "r_squared_accuracy",
                    "boundary_accuracy"):  # fmt: skip
            entry[key] = [float(np.mean([f[key] for f in fits])), None, None]
        out["deltas"][str(delta)] = entry
    return out


PROFILE = np.array([0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.05])


def test_a_cycle_whose_observation_is_the_prediction_has_r_squared_one(runs):
    """Cycled exactly as predicted off the boundary phase, which keeps its intact accuracy:
    R^2 1 without it, the boundary below the rest. A cycle that erases the model (every
    residue to 0) is explained as well by erasing as by the gates: no verdict."""
    intact = np.stack([np.tile(PROFILE, 3), np.tile(PROFILE, 3) + 0.02])
    boundary = np.arange(24) % 8 == 7
    exact = {d: np.where(boundary, intact, measure.cycle_prediction(intact, d, 8)) for d in (-1, 2)}
    _write(runs, "cycle", _record("cycle", "w8s8_1kv", _cycle(intact, exact)))
    erased = {1: np.zeros_like(intact)}
    _write(runs, "erased", _record("cycle", "w8s8_1kv", _cycle(intact, erased), label="erased"))
    results, rows = _read()
    by_label = {e["label"]: e for e in results["cycle"]}
    for d in by_label["W8/S8, 1 KV"]["deltas"]:
        assert d["r_squared_without_boundary"][0] == pytest.approx(1.0)
        assert d["erased_r_squared"] < 0.5
        assert d["intact_boundary"] == pytest.approx(0.06)
        assert d["predicted_boundary"] == pytest.approx(PROFILE[(7 - d["delta"]) % 8] + 0.01)
        assert d["boundary_accuracy"][0] == pytest.approx(0.06)
        assert d["boundary_accuracy"][0] < d["other_phases"]
    (d,) = by_label["erased"]["deltas"]
    assert d["erased_r_squared"] == pytest.approx(1.0)
    r2 = [r for r in rows if "R^2 of observed" in r.name]
    stays = [r for r in rows if "boundary phase stays below" in r.name]
    for found in (r2, stays):
        assert [r.passed for r in found if "W8/S8, 1 KV, delta" in r.config] == [True, True]
        assert [r.passed for r in found if "erased, delta +1" in r.config] == [False]


def _gates_item(static, per_window, key_gate, value_gate):
    """`lm gates` (one checkpoint) of a 2-layer W8 model, one KV head."""
    branches = {}
    for branch, gate in (("key", key_gate), ("value", value_gate)):
        mean_gate = [[[1 / 8] for _ in range(8)], [[x] for x in gate]]
        branches[branch] = {"static": [[s] for s in static[branch]],
                            "per_window": [[w] for w in per_window[branch]],
                            "mean_gate": mean_gate, "windows": 64}  # fmt: skip
    item = {"window": 8, "stride": 8, "gate": "scalar", "layers": 2, "branches": branches}
    return {"checkpoint": "x", **item, "peaks": measure.gate_peaks(item)}


def test_gates_in_both_shapes(runs):
    """Layer 0 content-driven (uniform on average, 3 offsets per window), layer 1 static
    (4.1 against 4.0) with its value one offset after its key; over training, the W of the
    design alone (the --over-training result holds no window)."""
    key = [0.0, 0.0, 0.1, 0.6, 0.2, 0.1, 0.0, 0.0]  # peaks at 3
    value = [0.0, 0.0, 0.0, 0.1, 0.6, 0.2, 0.1, 0.0]  # at 4
    static = {"key": [7.95, 4.1], "value": [7.9, 4.3]}
    per_window = {"key": [3.0, 4.0], "value": [3.2, 4.1]}
    plain = {"results": [_gates_item(static, per_window, key, value) for _ in range(2)]}
    _write(runs, "gates", _record("gates", "w8s8_1kv", plain))
    trajectory = {b: {"static": [[[[8.0], [7.9]]], [[[s[0]], [s[1]]]]],
                      "per_window": [[[[7.0], [7.5]]], [[[w[0]], [w[1]]]]]}
                  for b, s, w in (("key", static["key"], per_window["key"]),
                                  ("value", static["value"], per_window["value"]))}  # fmt: skip
    over = {"results": [{"run": "x", "steps": [500, 1000], "seeds": [3], "branches": trajectory}]}
    _write(runs, "gates_over", _record("gates", "w8s8_1kv", over))
    results, rows = _read()
    plain_entry, over_entry = sorted(results["gates"], key=lambda e: e["over_training"])
    keys = [g for g in plain_entry["gates"] if g["branch"] == "key"]
    assert [g["class"] for g in keys] == ["content-driven", "static"] * 2
    assert all(g["value_after_key"] for g in keys if g["layer"] == 1)
    assert mx.gate_summary(plain_entry)["value_after_key"] == 2
    assert over_entry["window"] == 8 and over_entry["checkpoint_step"] == 1000
    layer1 = next(g for g in over_entry["gates"] if g["branch"] == "key" and g["layer"] == 1)
    assert layer1["trajectory"] == {"steps": [500, 1000], "static": [7.9, 4.1],
                                    "per_window": [7.5, 4.0]}  # fmt: skip
    assert layer1["seed_id"] == 3 and layer1["class"] == "static"
    most = [r for r in rows if "most key gates" in r.name]
    assert len(most) == 2 and not any(r.passed for r in most)  # half, not most
    (after,) = [r for r in rows if "peaks one offset after" in r.name]
    assert after.passed and after.sgd == 1.0
    assert mx.gate_class(8.0, 7.9, 8) == "uniform" and mx.gate_class(4.0, 3.0, None) is None
    every_gate = mx.tables(results, {})[-1]  # the plain recording, with its peaks
    assert [(r[2], r[3], r[7], r[8], r[11], r[12]) for r in every_gate.rows] == [
        (0, 0, "content-driven", 0, 0, "no"), (0, 1, "static", 3, 4, "yes"),
        (1, 0, "content-driven", 0, 0, "no"), (1, 1, "static", 3, 4, "yes"),
    ]  # fmt: skip


def test_the_papers_numbers_say_what_paper_md_says():
    """PAPER.md §4 against the transcribed data.js: R^2 0.66-1.00 without the boundary;
    full attention's important layers hurt every phase alike; W8/S8, 1 KV (seed 42): layer 0
    everywhere, layers 9, 10, 14 a few phases; those layers' key gates statically
    concentrated with the value gate one offset later."""
    paper = mx.paper()
    assert "data.js" in paper["source"] and "8b6a7a54" in paper["source"]
    r2 = [d["r_squared_without_boundary"][0] for run in paper["cycling"]["runs"]
          for d in run["deltas"].values()]  # fmt: skip
    assert len(r2) == 30 and (round(min(r2), 2), round(max(r2), 2)) == (0.66, 1.0)
    maps = {(m["label"], m.get("seed")): m for m in paper["knockout"]}
    full = mx.paper_knockout_units(maps[("full attention, 1 KV", None)]["relative_change"], 8)
    top = min(full, key=lambda u: u["mean_change"])
    assert top["layer"] == 0 and top["pattern"] == mx.EVERY and top["alike"]
    assert {u["layer"] for u in full if u["pattern"] != mx.NONE} == {0, 9, 21}
    w8 = mx.paper_knockout_units(maps[("W8/S8, 1 KV", 42)]["relative_change"], 8)
    assert w8[0]["pattern"] == mx.EVERY
    assert all(w8[layer]["pattern"] == mx.FEW for layer in (9, 10, 14))
    assert w8[9]["hurt_phases"] == [5, 6] and w8[10]["hurt_phases"] == [3, 4]
    seed42 = mx.paper_gate_summary()[0]
    assert {9, 10, 14} <= set(seed42["static"]) and {9, 10, 14} <= set(seed42["value_after_key"])
    assert seed42["content_driven"] > seed42["key_gates"] / 2  # most: content-driven
    assert set(mx.reference()) >= {"source", "compressed", "full_attention", "mechanism"}


def test_nothing_recorded_gives_no_rows_the_papers_tables_and_a_labelled_figure(runs):
    from weakspots.figures import pretrain_mechanism as drawing

    results, rows = _read()
    assert rows == [] and results["knockout"] == results["gates"] == results["cycle"] == []
    knockout, cycling, gates, every_gate = mx.tables(results, {})
    assert len(knockout.rows) == 4 and len(cycling.rows) == 30 and len(gates.rows) == 4
    assert every_gate.rows == []
    for table in (knockout, cycling, gates):
        assert all(len(row) == len(table.columns) for row in table.rows)
    fig = drawing.make(results, None)
    try:
        assert "nothing recorded" in fig._suptitle.get_text()
        assert all(ax.get_xlabel() and ax.get_ylabel() for ax in fig.axes if ax.get_visible())
    finally:
        matplotlib.pyplot.close(fig)


def test_a_recording_of_an_unknown_kind_is_refused(runs):
    _write(runs, "bad", _record("probe", "w8s8_1kv", {}))
    with pytest.raises(ValueError, match="kind"):
        mx.run(mx.SIZES["quick"])


def test_tiny_rows_hold_and_the_figure_draws(tmp_path):
    from weakspots.figures import pretrain_mechanism as drawing

    results = mx.run(mx.SIZES["tiny"])
    predictions = mx.predict(mx.SIZES["tiny"], results)
    rows = mx.rows(results, predictions)
    assert rows and all(r.finding and r.passed for r in rows)
    assert {e["kind"] for e in results["recordings"]} == set(mx.KINDS)
    assert all(math.isfinite(r.rel_error) for r in rows if r.tolerance == 0.0)
    for table in mx.tables(results, predictions):
        assert all(len(row) == len(table.columns) for row in table.rows)
    fig = drawing.make(results, predictions)
    try:
        assert fig._suptitle.get_text().startswith("Planted")
        fig.savefig(tmp_path / "pretrain_mechanism.png")
        assert (tmp_path / "pretrain_mechanism.png").stat().st_size > 1000
    finally:
        matplotlib.pyplot.close(fig)
