"""kvpress's presses through `--press` on a tiny random Llama (the [kvpress] extra's venv:
kvpress 0.5.5 pins transformers < 5.3). CI runs this file there, none skipped."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="kvpress needs torch (the [kvpress] extra)")
transformers = pytest.importorskip("transformers", reason="kvpress needs transformers")
pytest.importorskip("kvpress", reason="the [kvpress] extra (its own venv: transformers < 5.3)")

from weakspots.cli import main  # noqa: E402
from weakspots.errors import ConfigError  # noqa: E402
from weakspots.probe.press import kvpress_version, parse_press, prefill  # noqa: E402


def _llama():
    torch.manual_seed(1)
    config = transformers.LlamaConfig(vocab_size=260, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=1024)  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


def _kept_positions(model, press, ids):
    """Per layer and KV head, the context positions whose keys the pressed cache holds, found
    by matching them against the dense cache's keys (a second path to the same cache)."""
    with torch.no_grad():
        dense = model(input_ids=ids, use_cache=True)
        dense = getattr(dense, "cache", None) or dense.past_key_values
        cache = prefill(model, press, ids)
    kept = []
    for full, cut in zip(dense.layers, cache.layers, strict=True):
        per_head = []
        for h in range(full.keys.shape[1]):
            distance = torch.cdist(
                cut.keys[0, h], full.keys[0, h], compute_mode="donot_use_mm_for_euclid_dist"
            )
            assert float(distance.min(-1).values.max()) < 1e-5  # every kept key is a context key
            per_head.append(sorted(distance.argmin(-1).tolist()))
        kept.append(per_head)
    return kept, dense


def test_chunkkv_keeps_whole_chunks_and_knorm_the_smallest_key_norms():
    model = _llama()
    ids = torch.randint(0, 260, (1, 96), generator=torch.Generator().manual_seed(0))
    chunk = parse_press("ChunkKVPress(press=KnormPress(compression_ratio=0.5), chunk_length=8)")
    kept, _ = _kept_positions(model, chunk.press, ids)
    for layer in kept:
        assert layer[0] == layer[1]  # ChunkKV picks the same chunks for every head
        chunks = {p // 8 for p in layer[0]}
        assert len(layer[0]) == 48 and len(chunks) == 6
        assert layer[0] == [c * 8 + i for c in sorted(chunks) for i in range(8)]
    knorm = parse_press("KnormPress(compression_ratio=0.25)")
    kept, dense = _kept_positions(model, knorm.press, ids)
    for layer, full in zip(kept, dense.layers, strict=True):
        for h, positions in enumerate(layer):
            norms = full.keys[0, h].norm(dim=-1).numpy()
            assert positions == sorted(np.argsort(norms, kind="stable")[:72].tolist())


def test_kvpress_specs_name_the_class_its_arguments_and_the_version():
    spec = parse_press("ChunkKVPress(press=SnapKVPress(compression_ratio=0.5),chunk_length=8)")
    assert spec.text == "ChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=8)"
    assert spec.library == f"kvpress {kvpress_version()}" and kvpress_version() == "0.5.5"
    assert spec.press.chunk_length == 8 and spec.press.press.compression_ratio == 0.5
    assert parse_press("BlockSelectionPress(block_size=4)").library == "weakspots"
    for text, words in {
        "SnapKVPres(compression_ratio=0.5)": "did you mean SnapKVPress",
        "SnapKVPress(compresion_ratio=0.5)": "did you mean compression_ratio",
        "SnapKVPress(compression_ratio=1.5)": "Compression ratio must be between 0 and 1",
        "ChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_lenght=8)": "chunk_length",
    }.items():
        with pytest.raises(ConfigError) as error:
            parse_press(text)
        assert str(error.value).startswith("--press: ") and words in str(error.value), str(
            error.value
        )


def test_a_kvpress_scan_keys_its_store_by_the_press_and_reports_it(tmp_path, capsys):
    path = tmp_path / "llama"
    _llama().save_pretrained(path)
    capsys.readouterr()
    argv = ["probe", "--backend", "hf", "--model", str(path), "--tokenizer", "byte",
            "--context", "256", "--stride", "4", "--trials", "1", "--digits", "2", "--quiet",
            "--press", "ChunkKVPress(press=KnormPress(compression_ratio=0.5), chunk_length=4)",
            "--press", "KnormPress(compression_ratio=0.5)", "--store", str(tmp_path / "s"),
            "--json"]  # fmt: skip
    assert main(argv) == 0
    reports = json.loads(capsys.readouterr().out)
    assert [r.get("press_library") for r in reports] == [None, "kvpress 0.5.5", "kvpress 0.5.5"]
    assert all(r["trials"] == 4 for r in reports)
    import weakspots

    table = weakspots.load(str(tmp_path / "s"))
    assert len(table) == 12 and table["hash"].nunique() == 12  # each press its own trials
    assert sorted(table["press"].dropna().unique()) == sorted(r["press"] for r in reports[1:])
