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


V4_FLAGS = (
    "--seq-len 32 --pairs 2 --key-vocab 8 --value-vocab 8 --filler-vocab 4 --d-model 32 "
    "--steps 2 --eval-every 2 --batch 2 --eval-batch 4 --eval-samples 1 --indexer-topk 2 --lr 1"
).split()


def test_lm_spec_design_v4_expands_as_the_command_line():
    """`design = "v4"` fills `V4_DESIGN` for every field the spec does not give, exactly as
    `weakspots lm train --design v4` with the same flags (a grid over `layers` lays out
    V4's schedule per point)."""
    import tomllib

    from weakspots.cli import build_parser
    from weakspots.cli.lm import lm_config

    fixed = "\n".join(
        f"{flag[2:]} = {value}" for flag, value in zip(V4_FLAGS[::2], V4_FLAGS[1::2], strict=True)
    )
    text = f'kind = "lm"\ndesign = "v4"\n[fixed]\n{fixed}\n[grid]\nlayers = [3, 5]\nseed = [0, 1]\n'
    runs = sweep.parse_spec(tomllib.loads(text)).runs()
    parser = build_parser()
    expected = [
        lm_config(
            parser.parse_args(
                ["lm", "train", *V4_FLAGS, "--design", "v4", "--layers", str(L), "--seed", str(s)]
            )
        )
        for L in (3, 5)
        for s in (0, 1)
    ]
    assert [r.config for r in runs] == expected
    assert [r.config.layout for r in runs[::2]] == ["swa,csa,hca", "swa,csa,hca,csa,hca"]
    first = runs[0].config
    assert (first.indexer_topk, first.lr, first.heads) == (2, 1.0, 4)  # given; given; design's
    assert first.sink and first.shared_kv and first.qk_norm
    # without the design the same spec is a plain decoder
    plain_text = text.replace('design = "v4"\n', "").replace("indexer-topk = 2\n", "")
    plain = sweep.parse_spec(tomllib.loads(plain_text)).runs()
    assert not (plain[0].config.sink or plain[0].config.shared_kv or plain[0].config.qk_norm)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"kind": "lm", "design": "v5"}, "design must be one of v4, got 'v5'"),
        ({"kind": "lm", "design": 4}, "design must be one of v4, got 4"),
        ({"kind": "train", "design": "v4"}, 'design is a key of kind = "lm" specs'),
    ],
)
def test_lm_spec_refuses_bad_designs(data, match):
    with pytest.raises(sweep.SpecError, match=match):
        sweep.parse_spec(data)


def test_lm_sweep_cli_refuses_a_bad_design_in_one_line(tmp_path, capsys):
    from weakspots.cli import main

    spec = tmp_path / "spec.toml"
    spec.write_text('kind = "lm"\ndesign = "v3"\n[fixed]\nsteps = 2\n')
    code = main(["sweep", str(spec), "--store", str(tmp_path / "s"), "--dry-run", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "design" in err[0] and "'v3'" in err[0], err
