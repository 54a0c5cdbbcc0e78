"""`kind = "lm"` sweep specs: parsed and validated as the flags of `weakspots lm train`, run into a store."""

import pytest

from weakspots.sims import store, sweep

TINY = dict(
    seq_len=32, pairs=2, key_vocab=8, value_vocab=8, filler_vocab=4, layers=1, d_model=16,
    heads=2, rope_dim=4, window=4, steps=4, eval_every=2, batch=4, eval_batch=8, eval_samples=1,
)  # fmt: skip


def test_lm_spec_runs_and_buckets():
    spec = sweep.parse_spec(
        {"kind": "lm", "fixed": TINY, "grid": {"operator": ["mean_pool", "none"], "seed": [0, 1]}}
    )
    runs = spec.runs()
    assert len(runs) == 4 and {r.kind for r in runs} == {"lm"}
    assert len({r.bucket for r in runs}) == 2  # seeds share a structure, operators do not
    assert len({r.hash for r in runs}) == 4


def test_lm_spec_errors_name_the_key():
    with pytest.raises(sweep.SpecError, match="seq_len"):
        sweep.parse_spec({"kind": "lm", "fixed": {**TINY, "seq_len": 33}}).runs()
    with pytest.raises(sweep.SpecError, match="chunks"):
        sweep.parse_spec({"kind": "lm", "fixed": {"chunks": 8}})


@pytest.mark.slow
def test_lm_sweep_writes_every_run_to_the_store(tmp_path):
    spec = sweep.parse_spec({"kind": "lm", "fixed": TINY, "grid": {"seed": [0, 1]}})
    report = sweep.run_sweep(spec.runs(), tmp_path)
    assert report.ran == 2
    table = store.load(tmp_path)
    assert len(table) == 2 and set(table["kind"]) == {"lm"}
    assert table["delta_max"].notna().all()
