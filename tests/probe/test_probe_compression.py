"""Chunked compression on a Hugging Face model (probe/compression.py), against references
computed here apart: explicit per-query loops in numpy, the registry's JAX operators, and
the model's own eager attention where nothing is old enough to be compressed."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="compression needs torch (the [hf] extra)")
transformers = pytest.importorskip("transformers", reason="compression needs transformers (the [hf] extra)")

from weakspots.cli import main  # noqa: E402
from weakspots.probe.compression import (  # noqa: E402
    OPERATORS,
    Compression,
    _Weights,
    apply,
    chunked_attention,
    pool,
    windows,
)


class _Module:
    layer_idx = 1


def _reference(c: Compression, params: dict, q, k, v, scaling):
    """Per head and query: the visible entries pooled here in numpy, the local tokens, one softmax."""
    q, k, v = (np.asarray(x, np.float64)[0] for x in (q, k, v))
    Hq, T, D = q.shape
    Hkv = k.shape[0]
    params = {n: np.asarray(p, np.float64) for n, p in params.items()}
    out = np.zeros((T, Hq, D))
    starts = list(range(0, T - c.window + 1, c.stride))
    for h in range(Hq):
        g = h // (Hq // Hkv)

        def entry(x, s, g=g):
            w = x[s : s + c.window]  # (W, D)
            if c.operator == "mean_pool":
                return w.mean(0)
            if c.operator == "max_pool":
                return w.max(0)
            if c.operator == "softmax_pool":
                a = np.exp(params["pooling_logits"][g] - params["pooling_logits"][g].max())
                return (a / a.sum()) @ w
            score = w @ params["wgate"][g] + params["ape"][g]  # deepseek_v4, per channel
            e = np.exp(score - score.max(0))
            return (e / e.sum(0) * (w @ params["wkv"][g])).sum(0)

        for t in range(T):
            keys, values = [], []
            for s in starts:
                if s + c.window - 1 <= t and s <= t - c.local_window:
                    keys.append(entry(k[g], s))
                    values.append(entry(v[g], s))
            for j in range(max(0, t - c.local_window + 1), t + 1):
                keys.append(k[g, j])
                values.append(v[g, j])
            logits = np.array(keys) @ q[h, t] * scaling
            p = np.exp(logits - logits.max())
            out[t, h] = (p / p.sum()) @ np.array(values)
    return out


@pytest.mark.parametrize("operator", OPERATORS)
@pytest.mark.parametrize("window,stride,local", [(4, 4, 6), (4, 2, 5), (3, 3, 2)])
def test_chunked_attention_matches_an_explicit_numpy_reference(operator, window, stride, local):
    torch.manual_seed(0)
    c = Compression(operator, window, stride, local, seed=3)
    q, k, v = torch.randn(1, 4, 23, 8), torch.randn(1, 2, 23, 8), torch.randn(1, 2, 23, 8)
    weights = _Weights(c)
    out, _ = chunked_attention(_Module(), q, k, v, None, 0.35, compression=c, weights=weights)
    params = weights(1, 2, 8, k.device, k.dtype)
    expected = _reference(c, {n: p.numpy() for n, p in params.items()}, q, k, v, 0.35)
    np.testing.assert_allclose(out[0].numpy(), expected, rtol=1e-5, atol=1e-5)


def test_the_pooling_is_the_registry_operators():
    """mean, max (identity projection) and softmax pooling against `idealized.operators`' JAX
    functions; deepseek_v4 against `idealized.deepseek_v4` up to its RMSNorm (left out here)."""
    import jax.numpy as jnp

    from weakspots.idealized.deepseek_v4 import deepseek_v4, rms_norm
    from weakspots.idealized.operators.registry import lookup

    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 1, 5, 4, 6)).astype(np.float32)  # (B, H, C, W, D)
    tx = torch.from_numpy(x)
    mean = lookup("mean_pool").pool(jnp.asarray(x[0, 0]))
    np.testing.assert_allclose(pool("mean_pool", tx, {})[0, 0], mean, rtol=1e-6)
    maximum = lookup("max_pool").pool(jnp.asarray(x[0, 0]), jnp.eye(6))
    np.testing.assert_allclose(pool("max_pool", tx, {})[0, 0], maximum, rtol=1e-6)
    logits = rng.normal(size=(1, 4)).astype(np.float32)
    soft = lookup("softmax_pool").pool(jnp.asarray(x[0, 0]), jnp.asarray(logits[0]))
    got = pool("softmax_pool", tx, {"pooling_logits": torch.from_numpy(logits)})[0, 0]
    np.testing.assert_allclose(got, soft, rtol=1e-5, atol=1e-6)
    wkv, wgate = rng.normal(size=(2, 6, 6)).astype(np.float32)
    ape = rng.normal(size=(4, 6)).astype(np.float32)
    v4 = deepseek_v4(jnp.asarray(x[0, 0].reshape(20, 6)), jnp.asarray(wkv), jnp.asarray(wgate),
                     jnp.asarray(ape), ratio=4, overlap=False)  # fmt: skip
    params = {"wkv": torch.from_numpy(wkv)[None], "wgate": torch.from_numpy(wgate)[None],
              "ape": torch.from_numpy(ape)[None]}  # fmt: skip
    got = rms_norm(jnp.asarray(pool("deepseek_v4", tx, params)[0, 0].numpy()), 1e-6)
    np.testing.assert_allclose(got, v4, rtol=1e-4, atol=1e-5)


def test_windows_are_w_tokens_every_s():
    x = torch.arange(10.0).reshape(1, 1, 10, 1)
    w = windows(x, 4, 2)[0, 0, :, :, 0]
    assert w.tolist() == [[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7], [6, 7, 8, 9]]
    assert windows(x, 11, 2).shape[2] == 0


def test_padded_rows_read_as_the_unpadded_sequence():
    """A boolean mask hiding left pads (and pads between a shared prefix and the row): the
    real queries' outputs equal those of the sequence alone."""
    torch.manual_seed(1)
    c = Compression("mean_pool", 4, 2, 3)
    weights = _Weights(c)
    q, k, v = torch.randn(1, 2, 12, 8), torch.randn(1, 2, 12, 8), torch.randn(1, 2, 12, 8)
    alone, _ = chunked_attention(_Module(), q, k, v, None, 0.3, compression=c, weights=weights)
    pads = [0, 1, 2]  # key indices 0..2 are pads in row 1
    qp = torch.cat([torch.randn(1, 2, 3, 8), q], 2)
    kp = torch.cat([torch.randn(1, 2, 3, 8), k], 2)
    vp = torch.cat([torch.randn(1, 2, 3, 8), v], 2)
    real = torch.ones(15, dtype=torch.bool)
    real[pads] = False
    mask = torch.tril(torch.ones(15, 15, dtype=torch.bool)) & real[None]
    out, _ = chunked_attention(_Module(), torch.cat([qp, qp]), torch.cat([kp, kp]),
                               torch.cat([vp, vp]), torch.stack([torch.tril(torch.ones(15, 15,
                               dtype=torch.bool)), mask])[:, None], 0.3, compression=c,
                               weights=weights)  # fmt: skip
    np.testing.assert_allclose(out[1, 3:].numpy(), alone[0].numpy(), rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def tiny_llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    )  # fmt: skip
    return config


def _model(config, implementation="eager"):
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.set_attn_implementation(implementation)
    return model


@pytest.mark.parametrize("window,local", [(64, 1), (4, 40), (64, 64)])
def test_nothing_old_enough_to_compress_is_the_models_eager_attention(tiny_llama, window, local):
    """W longer than the prompt (no entry), or a local window holding every token: the
    logits are the model's own eager attention's."""
    ids = torch.randint(0, 64, (1, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        eager = _model(tiny_llama)(ids).logits
        model = apply(_model(tiny_llama), Compression("mean_pool", window, None, local))
        compressed = model(ids).logits
    if window > 40 and local == 1:  # nothing but the token itself: not eager attention
        assert not torch.allclose(compressed, eager, atol=1e-3)
        return
    np.testing.assert_allclose(compressed.numpy(), eager.numpy(), rtol=1e-5, atol=1e-5)


def test_compression_changes_the_model_and_the_cached_decoding_agrees(tiny_llama):
    """With old tokens compressed the logits move; greedy decoding through the cache gives
    the tokens a full forward pass of the same attention picks (a consistency check)."""
    ids = torch.randint(0, 64, (1, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        eager = _model(tiny_llama)(ids).logits
        model = apply(_model(tiny_llama), Compression("max_pool", 4, None, 8))
        assert (model(ids).logits - eager).abs().max() > 1e-3
        out = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)
        full = model(out).logits[0, 39:-1].argmax(-1)
    assert out[0, 40:].tolist() == full.tolist()


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--compress", "gzip"], "--compress: one of mean_pool"),
        (["--compress", "mean_pool", "--window", "0"], "--window: an integer >= 1"),
        (["--compress", "mean_pool", "--window", "4", "--compress-stride", "8"],
         "--compress-stride: at most the window"),
        (["--compress-stride", "2"], "--compress-stride: applies with --compress only"),
        (["--compress", "mean_pool", "--compress-weights", "/nonexistent.npz"],
         "--compress-weights: mean_pool has no weights"),
    ],
)  # fmt: skip
def test_bad_compression_flags_are_refused_in_one_line(tmp_path, capsys, flags, message):
    (tmp_path / "config.json").write_text("{}")
    code = main(["probe", "--backend", "hf", "--model", str(tmp_path), "--tokenizer", "byte",
                 "--context", "256", "--quiet", *flags])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and message in err, err


def test_compression_on_a_server_is_refused(capsys):
    code = main(["probe", "--url", "http://127.0.0.1:9/v1", "--model", "m", "--tokenizer", "byte",
                 "--context", "256", "--compress", "mean_pool", "--quiet"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--compress: compression applies to the hf backend only" in err


def test_a_batched_scan_reads_each_prompt_as_it_alone(tmp_path):
    """The hf backend decodes prompts together (a shared prefix's cache, left pads); with
    compression every prompt's greedy answer is the one it gets decoded alone."""
    import weakspots

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=260, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path / "m")
    fields = dict(backend="hf", model=str(tmp_path / "m"), tokenizer="byte", task="records",
                  stride=2, trials=8, context=160, compress="mean_pool", local_window=8)  # fmt: skip
    answers = []
    for batch in (1, 8):
        store = tmp_path / f"s{batch}"
        weakspots.probe(**fields, concurrency=batch, store=str(store))
        table = weakspots.load(store).sort_values("prompt_sha256")
        answers.append(table["continuation"].tolist())
    assert len(answers[0]) == 16 and answers[0] == answers[1]
