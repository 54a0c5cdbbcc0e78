"""The project's own presses (`probe.presses`) and `--press` on a tiny random Llama, on
whichever transformers line is installed (they need no kvpress)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="presses need torch (the [hf] or [kvpress] extra)")
transformers = pytest.importorskip("transformers", reason="presses need transformers")

from weakspots.cli import main  # noqa: E402
from weakspots.errors import ConfigError  # noqa: E402
from weakspots.probe import press as press_module  # noqa: E402
from weakspots.probe.backends import HFBackend  # noqa: E402
from weakspots.probe.design import ProbeConfig, text_trials  # noqa: E402
from weakspots.probe.press import parse_press, prefill  # noqa: E402
from weakspots.probe.presses import BlockSelectionPress, PlantedPress  # noqa: E402
from weakspots.probe.tokenizers import ByteTokenizer  # noqa: E402


def _llama(vocab=260, layers=2):
    torch.manual_seed(1)
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=layers, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=1024)  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama")
    _llama().save_pretrained(path)
    return path


def _dense_cache(model, ids):
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    return [(layer.keys, layer.values) for layer in cache.layers]


def test_planted_press_drops_exactly_one_phase_from_every_layer_and_head():
    model = _llama()
    ids = torch.randint(0, 260, (1, 45), generator=torch.Generator().manual_seed(0))
    dense = _dense_cache(model, ids)
    with torch.no_grad():
        cache = prefill(model, PlantedPress(period=4, phase=3), ids)
    kept = [t for t in range(45) if t % 4 != 3]
    assert len(cache.layers) == len(dense) == 2
    for layer, (keys, values) in zip(cache.layers, dense, strict=True):
        assert layer.keys.shape == (1, 2, len(kept), 8)
        np.testing.assert_array_equal(layer.keys.numpy(), keys[:, :, kept].numpy())
        np.testing.assert_array_equal(layer.values.numpy(), values[:, :, kept].numpy())


def _block_scores_reference(keys, queries, block, local, summary):
    """Per KV head and block, loops in numpy: the mean over queries of softmax over blocks."""
    keys, queries = keys.double().numpy()[0], queries.double().numpy()[0]
    kv_heads, length, dim = keys.shape
    group = queries.shape[0] // kv_heads
    blocks = (length - local) // block
    out = np.zeros((kv_heads, blocks))
    for h in range(kv_heads):
        logits = []
        for q in queries[h * group : (h + 1) * group].reshape(-1, dim):
            row = []
            for j in range(blocks):
                k = keys[h, j * block : (j + 1) * block]
                if summary == "minmax":
                    row.append(
                        sum(max(q[c] * k[:, c].min(), q[c] * k[:, c].max()) for c in range(dim))
                    )
                else:
                    row.append(q @ k.mean(0))
            row = np.array(row) / np.sqrt(dim)
            e = np.exp(row - row.max())
            logits.append(e / e.sum())
        out[h] = np.mean(logits, axis=0)
    return out


@pytest.mark.parametrize("summary", ["minmax", "mean"])
def test_block_selection_scores_and_keeps_the_top_blocks_and_the_local_window(summary):
    gen = torch.Generator().manual_seed(2)
    keys = torch.randn(1, 2, 53, 8, generator=gen)
    queries = torch.randn(1, 4, 16, 8, generator=gen)
    press = BlockSelectionPress(
        compression_ratio=0.5, block_size=4, summary=summary, local_window=9
    )
    want = _block_scores_reference(keys, queries, 4, 9, summary)
    np.testing.assert_allclose(press.scores(keys, queries).numpy()[0], want, rtol=1e-5, atol=1e-7)
    index = press.keep(keys, queries).numpy()[0]
    # 11 whole blocks before the 9 local tokens; 53 - 44 = 9 always kept; budget 26 -> 4 blocks
    assert press.plan(53) == (11, 4)
    for h in range(2):
        top = sorted(np.argsort(-want[h], kind="stable")[:4])
        expected = [j * 4 + i for j in top for i in range(4)] + list(range(44, 53))
        assert index[h].tolist() == expected


def test_a_press_that_keeps_everything_answers_as_the_uncompressed_model(llama_dir):
    """The press path (context prefilled under the press, question and answer decoded after,
    one prompt at a time) against the batched dense path: the same tokens and log-probabilities."""
    config = ProbeConfig(backend="hf", model=str(llama_dir), tokenizer="byte", stride=(4,),
                         context=(256,), trials=1, digits=3)  # fmt: skip
    trials = text_trials(config, ByteTokenizer())
    dense = HFBackend(str(llama_dir), batch=4).complete_trials(trials)
    keep_all = parse_press("BlockSelectionPress(compression_ratio=0.0, block_size=4)")
    pressed = HFBackend(str(llama_dir), press=keep_all).complete_trials(trials)
    for a, b in zip(dense, pressed, strict=True):
        assert a.token_ids == b.token_ids
        np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, atol=1e-4)


def test_decoding_after_a_planted_press_is_attention_with_those_keys_masked(llama_dir):
    """A second method: the whole prompt in one forward pass with a 4-D mask that hides the
    dropped context tokens from the question's queries only (the context itself was read
    densely at prefill) gives the press path's first answer token and its log-probability."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(llama_dir), attn_implementation="eager"
    ).eval()
    prompt = torch.randint(0, 260, (60,), generator=torch.Generator().manual_seed(3)).tolist()
    split, period, phase = 48, 5, 2
    spec = parse_press(f"PlantedPress(period={period}, phase={phase})")
    backend = HFBackend(str(llama_dir), press=spec)
    got = backend._pressed(tuple(prompt), split, 1)
    n = len(prompt)
    allowed = torch.tril(torch.ones(n, n, dtype=torch.bool))
    dropped = torch.tensor([t < split and t % period == phase for t in range(n)])
    allowed[split:, dropped] = False
    mask = torch.zeros(1, 1, n, n).masked_fill(~allowed, torch.finfo(torch.float32).min)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt]), attention_mask=mask).logits[0, -1]
    logp = torch.log_softmax(logits.float(), -1)
    assert got.token_ids[0] == int(logp.argmax())
    np.testing.assert_allclose(got.token_logprobs[0], float(logp.max()), atol=1e-4)


def test_press_specs_are_parsed_without_evaluating_code():
    spec = parse_press("  BlockSelectionPress( block_size=8,summary='mean' )")
    assert spec.text == "BlockSelectionPress(block_size=8, summary='mean')"
    assert (
        spec.press == BlockSelectionPress(block_size=8, summary="mean")
        and spec.library == "weakspots"
    )
    bad = {
        "BlockSelectonPress(block_size=8)": "did you mean BlockSelectionPress",
        "BlockSelectionPress(block_sise=8)": "did you mean block_size",
        "BlockSelectionPress(8)": "by name",
        "BlockSelectionPress(block_size=__import__('os').getpid())": "expected a press call",
        "BlockSelectionPress(block_size=2 + 2)": "literal or a press",
        "BlockSelectionPress(block_size=0)": "block_size",
        "PlantedPress(period=4, phase=4)": "phase",
        "__import__('os')": "unknown press",
        "BlockSelectionPress(block_size=8": "not a press call",
        "open": "expected a press call",
    }
    for text, words in bad.items():
        with pytest.raises(ConfigError, match="--press") as error:
            parse_press(text)
        assert words in str(error.value), (text, str(error.value))


def test_bad_press_flags_are_refused_in_one_line_before_the_model_loads(
    llama_dir, capsys, monkeypatch
):
    loads = []
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: loads.append(a))  # fmt: skip
    monkeypatch.setattr(
        press_module, "kvpress_classes", lambda: None
    )  # as where kvpress is missing
    cases = [
        (["--press", "SnapKVPress(compression_ratio=0.5)"], "--press: unknown press 'SnapKVPress'"),
        (
            ["--press", "PlantedPress(period=4)", "--press", "PlantedPress(perod=4)"],
            "--press: PlantedPress has no",
        ),
        (["--question-aware"], "--question-aware"),
        (["--no-dense"], "--no-dense"),
        (["--press", "PlantedPress(period=4)", "--compress", "mean_pool"], "--press"),
        (["--press", "PlantedPress(period=4)", "--task", "records", "--trials", "16"], "--press"),
    ]
    for flags, start in cases:
        code = main(["probe", "--backend", "hf", "--model", str(llama_dir), "--tokenizer", "byte",
                     "--context", "128", "--quiet", *flags])  # fmt: skip
        err = capsys.readouterr().err.strip()
        assert code == 2 and "\n" not in err, (flags, err)
        assert err.startswith(f"weakspots probe: error: {start}"), (flags, err)
        if flags[1:2] == ["SnapKVPress(compression_ratio=0.5)"]:
            assert "pip install weakspots[kvpress]" in err
    assert loads == []


def test_the_press_scan_runs_the_dense_control_first_and_resumes_from_its_store(
    llama_dir, tmp_path, capsys
):
    import json

    store = tmp_path / "store"
    argv = ["probe", "--backend", "hf", "--model", str(llama_dir), "--tokenizer", "byte",
            "--context", "256", "--stride", "4", "--trials", "1", "--digits", "2", "--quiet",
            "--press", "PlantedPress(period=4, phase=1)", "--press",
            "BlockSelectionPress(compression_ratio=0.5, block_size=4)", "--question-aware",
            "--store", str(store), "--json", "--figures", str(tmp_path / "figs")]  # fmt: skip
    assert main(argv) == 0
    reports = json.loads(capsys.readouterr().out)
    assert [r.get("press") for r in reports] == [
        None,
        "PlantedPress(period=4, phase=1)",
        "BlockSelectionPress(compression_ratio=0.5, block_size=4)",
    ]
    assert [r.get("question_aware") for r in reports] == [None, True, True]
    assert all(r["trials"] == 4 for r in reports) and reports[1]["press_library"] == "weakspots"
    assert (tmp_path / "figs" / "probe_presses_s4.png").is_file()
    assert main(argv) == 2  # the store holds these trials: refused without --resume
    assert "--resume" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert [r["phase_accuracy"] for r in again] == [r["phase_accuracy"] for r in reports]
