"""The mechanism measurements on pretrained backbones (sims.pretrain.mechanism) against
independent answers: explicit numpy forwards, closed forms, invariants."""

import json

import jax
import numpy as np
import pytest
from flax import nnx

from weakspots.idealized.pretrain import attention as A
from weakspots.idealized.pretrain.config import PretrainConfig
from weakspots.idealized.pretrain.model import Backbone
from weakspots.idealized.pretrain.tokenizer import Tokenizer
from weakspots.sims.pretrain import checkpoint, lookup, mechanism
from weakspots.sims.pretrain.train import merge, pretrain

SMALL = dict(d_model=16, layers=2, heads=4, kv_heads=2, head_dim=8, mlp_hidden=16,
             attention="compressed", window=4, stride=4, local_window=4, seq_len=24)  # fmt: skip


def config(**changes) -> PretrainConfig:
    return PretrainConfig(**{"vocab": 11, **SMALL, **changes})


def params_of(cfg: PretrainConfig, seed: int = 0) -> nnx.State:
    """Random parameters, gate biases moved off their initial 0."""
    model = Backbone(cfg, rngs=nnx.Rngs(seed))
    rng = np.random.default_rng(seed)
    for path, value in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        if path[-1] in ("gate_bias", "scale"):
            value.set_value(value.get_value() + 0.3 * rng.normal(size=value.shape))
    return nnx.split(model)[1]


def tokens_of(cfg: PretrainConfig, batch: int = 3, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, cfg.vocab, (batch, cfg.seq_len)).astype(np.int32)


def leaves(state) -> dict:
    return {str(k): np.asarray(v.get_value()) for k, v in nnx.to_flat_state(state)}


KINDS = [config(), config(attention="full"),
         pytest.param(config(gate="vector", tied_kv=True), marks=pytest.mark.slow)]  # fmt: skip


# ----------------------------------------------------------------------------- the hook


@pytest.mark.parametrize("cfg", KINDS, ids=["compressed", "full", "vector-tied"])
def test_override_by_own_heads_is_bit_identical(cfg):
    scorer = mechanism.Scorer(cfg, params_of(cfg))
    tokens = tokens_of(cfg)
    own = scorer.heads(tokens)  # (L, B, H, hd): per prompt, its own heads
    mask = np.ones((cfg.layers, cfg.heads), dtype=bool)
    np.testing.assert_array_equal(scorer.logits(tokens, mask, own), scorer.logits(tokens))
    none = np.zeros_like(mask)
    other = np.full((cfg.layers, cfg.heads, cfg.head_dim), 7.0, np.float32)
    np.testing.assert_array_equal(scorer.logits(tokens, none, other), scorer.logits(tokens))


@pytest.mark.parametrize("cfg", KINDS[:2], ids=["compressed", "full"])
def test_heads_are_what_the_layer_projects(cfg):
    model = merge(cfg, params_of(cfg))
    x = np.random.default_rng(2).normal(size=(2, cfg.seq_len, cfg.d_model)).astype(np.float32)
    attn = model.layers[0].self_attn
    np.testing.assert_allclose(attn.output(attn.heads(x)), attn(x), rtol=1e-6, atol=1e-7)


def rms(y, scale):
    return y / np.sqrt(np.mean(y**2, axis=-1, keepdims=True) + A.NORM_EPS) * scale


def silu(x):
    return x / (1 + np.exp(-x))


@pytest.mark.parametrize("kind", ["full", "compressed"])
def test_knocking_out_the_only_kv_head_replaces_the_attention_output(kind):
    """One layer, one KV head read by every query head: at the last position the attention
    output becomes o_proj(calibration mean), so the logits there are an explicit function
    of the last token alone."""
    cfg = config(attention=kind, layers=1, kv_heads=1)
    params = params_of(cfg)
    scorer = mechanism.Scorer(cfg, params)
    calibration = tokens_of(cfg, batch=5, seed=3)
    means = scorer.heads(calibration).astype(np.float64).mean(axis=1)  # (1, H, hd)
    evaluation = tokens_of(cfg, batch=4, seed=4)
    [unit] = [u for u in mechanism.knockout_units(cfg) if u["unit"] == "head"]
    assert unit["query_heads"] == list(range(cfg.heads))
    knocked = scorer.logits(evaluation, mechanism.unit_mask(cfg, unit), means.astype(np.float32))
    p = {k: np.asarray(v, np.float64) for k, v in leaves(params).items()}

    def get(*names):
        [value] = [v for k, v in p.items() if all(f"'{n}'" in k for n in names)]
        return value

    x = get("embed_tokens", "embedding")[evaluation[:, -1]]
    y = x + means.reshape(1, -1) @ get("self_attn", "o_proj", "kernel")
    h = rms(y, get("post_attention_layernorm", "scale"))
    y = y + (silu(h @ get("gate_proj", "kernel")) * (h @ get("up_proj", "kernel"))) @ get(
        "down_proj", "kernel"
    )
    [norm] = [v for k, v in p.items() if k.startswith("('norm'")]
    expected = rms(y, norm) @ get("lm_head", "kernel")
    np.testing.assert_allclose(knocked, expected, rtol=2e-4, atol=2e-5)
    assert not np.allclose(knocked, scorer.logits(evaluation), atol=1e-4)


# ----------------------------------------------------------------------------- knockout


LOOKUP_CFG = config(vocab=Tokenizer.default().vocab_size, seq_len=372, layers=1, kv_heads=2)


def test_calibration_of_the_prompt_itself_leaves_its_logits_unchanged():
    scorer = mechanism.Scorer(LOOKUP_CFG, params_of(LOOKUP_CFG))
    prompts = lookup.design("prefix", prompts_per_residue=2)
    prompt = prompts[5]
    means = mechanism.calibration_means(scorer, [prompt])  # the mean of one: itself
    tokens = prompt.tokens[None]
    intact = scorer.logits(tokens)
    for unit in mechanism.knockout_units(LOOKUP_CFG):
        mask = mechanism.unit_mask(LOOKUP_CFG, unit)
        # the means come from another compiled program (`Scorer.heads`): float32 rounding
        np.testing.assert_allclose(scorer.logits(tokens, mask, means), intact, rtol=1e-5, atol=1e-8)
    other = mechanism.calibration_means(scorer, [prompts[30]])
    assert not np.allclose(scorer.logits(tokens, mask, other), intact, rtol=1e-3, atol=1e-6)


def test_calibration_is_disjoint_from_the_evaluation():
    evaluation = lookup.design("prefix", prompts_per_residue=2, seed=3)
    calibration = mechanism.calibration_design("prefix", 2, seed=3)
    mechanism.check_disjoint(calibration, evaluation)
    assert len(calibration) == 48
    with pytest.raises(ValueError, match="--calibration"):
        mechanism.check_disjoint(evaluation[:3], evaluation)
    with pytest.raises(ValueError, match="--calibration"):
        mechanism.knockout([(LOOKUP_CFG, None)], evaluation, evaluation[:2])


@pytest.mark.slow
def test_knockout_report_on_two_seeds():
    checkpoints = [(LOOKUP_CFG, params_of(LOOKUP_CFG, s)) for s in (0, 1)]
    evaluation = lookup.design("prefix", prompts_per_residue=2)
    calibration = mechanism.calibration_design("prefix", 2)
    calls = []
    out = mechanism.knockout(
        checkpoints, evaluation, calibration, progress=lambda d, t: calls.append((d, t))
    )
    units = mechanism.knockout_units(LOOKUP_CFG)
    assert [u["unit"] for u in out["units"]] == ["head", "head", "layer"]
    assert calls[-1] == (2 * (len(units) + 1), 2 * (len(units) + 1))
    change = np.asarray(out["change"])
    interval = np.asarray(out["change_interval"])
    assert change.shape == (3, 24) and interval.shape == (3, 24, 2)
    assert np.all(interval[..., 0] <= change + 1e-12) and np.all(change <= interval[..., 1] + 1e-12)
    accuracy = np.asarray(out["accuracy"])  # (seeds, units, residues)
    intact = np.asarray(out["intact"]["residue_accuracy"])
    np.testing.assert_allclose(change, (accuracy - intact[:, None]).mean(axis=0), atol=1e-12)
    for u, row in enumerate(out["relative_change"]):
        for r, value in enumerate(row):
            base = out["intact"]["residue_mean"][r]
            assert (value is None) == (base == 0)
            if value is not None:
                assert value == pytest.approx(change[u, r] / base)


def test_difference_interval_with_seeds_as_clusters():
    # one seed: the paired normal interval of the prompts' differences
    d = np.array([-1.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0])
    mean, lo, hi = mechanism.difference_interval(np.array([d.mean()]), d)
    half = 1.959963984540054 * d.std(ddof=1) / np.sqrt(8)
    assert (mean, lo, hi) == pytest.approx((-0.25, -0.25 - half, -0.25 + half))
    # seeds that disagree: at least the t interval over seeds
    seeds = np.array([-0.5, 0.1, -0.2])
    _, lo, hi = mechanism.difference_interval(seeds, np.zeros(30))
    t = 4.302652729911275 * seeds.std(ddof=1) / np.sqrt(3)
    assert (lo, hi) == pytest.approx((seeds.mean() - t, seeds.mean() + t))


def test_hurt_residues_reads_the_intervals():
    result = {"change_interval": [[[-0.5, -0.1], [-0.2, 0.1], [-0.3, -0.0001]],
                                  [[0.0, 0.2], [-0.1, 0.1], [-0.2, 0.3]]]}  # fmt: skip
    assert mechanism.hurt_residues(result) == [[0, 2], []]


# ----------------------------------------------------------------------------- gates


def test_concentration_closed_forms():
    w = 6
    uniform = np.full((2, 10, w, 3), 1.0 / w)
    static, per_window = mechanism.concentration(uniform)
    np.testing.assert_allclose(static, w) and np.testing.assert_allclose(per_window, w)
    onehot = np.zeros((10, w, 1))
    onehot[:, 2] = 1.0
    np.testing.assert_allclose(mechanism.concentration(onehot), [[1.0], [1.0]])
    # one-hot on a different offset in each window: per window 1, statically spread evenly
    rotating = np.zeros((w, w, 1))
    rotating[np.arange(w), np.arange(w)] = 1.0
    static, per_window = mechanism.concentration(rotating)
    np.testing.assert_allclose([static[0], per_window[0]], [w, 1.0], rtol=1e-6)


def test_static_concentration_is_at_least_the_per_window():
    """exp(H(E[alpha])) >= E[exp(H(alpha))] (a gate's mean is at least as spread as its
    windows, on average): a property over random gates of many shapes."""
    rng = np.random.default_rng(0)
    sharpness = rng.choice([0.05, 0.3, 1.0, 5.0], size=(300, 1, 1))
    alpha = rng.gamma(np.broadcast_to(sharpness, (300, 5, 6)))  # Dirichlet: normalised gammas
    alpha = (alpha / alpha.sum(axis=-1, keepdims=True))[..., None]  # (gates, N, W, 1)
    static, per_window = mechanism.concentration(alpha)
    assert static.shape == (300, 1)
    assert np.all(static >= per_window - 1e-5)
    assert np.mean(static > per_window + 0.1) > 0.5  # strictly, for most random gates


def set_gates(params, bias_at: int | None, big: float = 60.0):
    """Gate matrices Z = 0 and biases one-hot on offset `bias_at` (None: zero: uniform)."""

    def edit(path, leaf):
        names = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
        if names[-1] == "gate":
            return np.zeros_like(leaf)
        if names[-1] == "gate_bias":
            b = np.zeros_like(leaf)
            if bias_at is not None:
                b[bias_at] = big
            return b
        return leaf

    return jax.tree_util.tree_map_with_path(edit, params)


def test_gate_concentration_of_uniform_and_one_hot_gates():
    cfg = config(window=4, stride=4)
    tokens = tokens_of(cfg)
    flat = cfg.replace(gate="uniform")
    uniform = mechanism.gate_concentration(params_of(flat), flat, tokens)
    for branch in ("key", "value"):
        np.testing.assert_allclose(uniform["branches"][branch]["static"], 4.0, rtol=1e-6)
        np.testing.assert_allclose(uniform["branches"][branch]["per_window"], 4.0, rtol=1e-6)
    zero_z = set_gates(params_of(cfg), None)
    np.testing.assert_allclose(
        mechanism.gate_concentration(zero_z, cfg, tokens)["branches"]["key"]["static"], 4.0
    )
    onehot = mechanism.gate_concentration(set_gates(params_of(cfg), 1), cfg, tokens)
    key = onehot["branches"]["key"]
    np.testing.assert_allclose(key["static"], 1.0, atol=1e-5)
    np.testing.assert_allclose(key["per_window"], 1.0, atol=1e-5)
    mean_gate = np.asarray(key["mean_gate"])  # (L, W, E)
    np.testing.assert_allclose(mean_gate[:, 1], 1.0, atol=1e-6)
    assert key["windows"] == 3 * cfg.entries
    tied = mechanism.gate_concentration(
        params_of(cfg.replace(tied_kv=True)), cfg.replace(tied_kv=True), tokens
    )
    assert set(tied["branches"]) == {"key"}
    with pytest.raises(ValueError, match="--checkpoint"):
        mechanism.gate_concentration(
            params_of(config(attention="full")), config(attention="full"), tokens
        )


def test_gate_peaks_find_a_value_gate_one_offset_after_its_key_gate():
    cfg = config(window=4, stride=4, layers=1, kv_heads=1)
    params = set_gates(params_of(cfg), 1)

    def value_at(path, leaf):
        names = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
        if names[-1] == "gate_bias" and names[-2] == "value_pooling":
            return np.roll(leaf, 1, axis=0)  # value one-hot on offset 2
        return leaf

    params = jax.tree_util.tree_map_with_path(value_at, params)
    result = mechanism.gate_concentration(params, cfg, tokens_of(cfg))
    assert mechanism.gate_peaks(result) == [
        [{"key_peak": 1, "value_peak": 2, "value_after_key": True}]
    ]
    same = mechanism.gate_concentration(set_gates(params_of(cfg), 3), cfg, tokens_of(cfg))
    assert mechanism.gate_peaks(same) == [
        [{"key_peak": 3, "value_peak": 3, "value_after_key": False}]
    ]


# ----------------------------------------------------------------------------- cycling


@pytest.mark.parametrize("gate", ["scalar", "vector"])
def test_cycling_by_delta_then_minus_delta_or_by_w_is_the_identity(gate):
    cfg = config(gate=gate)
    params = params_of(cfg)
    before = leaves(params)
    for back in (
        mechanism.cycle(mechanism.cycle(params, cfg, 3), cfg, -3),
        mechanism.cycle(params, cfg, cfg.window),
    ):
        after = leaves(back)
        assert after.keys() == before.keys()
        for key in before:
            np.testing.assert_array_equal(after[key], before[key])
    moved = leaves(mechanism.cycle(params, cfg, 1))
    changed = sorted(k for k in before if not np.array_equal(before[k], moved[k]))
    assert len(changed) == 4 * cfg.layers  # Z and b of the key and value branches
    assert all("pooling" in k and "payload" not in k for k in changed)


@pytest.mark.parametrize("delta", [1, -1, 2, 3])
def test_cycling_one_hot_gates_moves_the_selected_offset(delta):
    cfg = config(window=4, stride=4)
    o = 1
    cycled = mechanism.cycle(set_gates(params_of(cfg), o), cfg, delta)
    model = merge(cfg, cycled)
    pool = model.layers[0].self_attn.key_pooling
    windows = (
        np.random.default_rng(5).normal(size=(2, 3, cfg.window, cfg.d_model)).astype(np.float32)
    )
    moved = (o + delta) % cfg.window
    alpha = np.asarray(pool.pooling_weights(windows))
    np.testing.assert_allclose(alpha[:, :, moved], 1.0, atol=1e-6)
    payload = np.asarray(pool.payload.get_value(), np.float64)
    expected = (windows[:, :, moved].astype(np.float64) @ payload[moved]).reshape(2, 3, 2, 8)
    np.testing.assert_allclose(pool(windows), expected, rtol=1e-5, atol=1e-6)


def test_cycle_prediction_maps_residues_to_phases():
    stride = 4
    phases = np.array([0.9, 0.8, 0.7, 0.1])
    noise = np.array([0.02, -0.02, 0.0, 0.01, -0.01, 0.0, 0.0, 0.0] + [0.0] * 16)
    intact = np.tile(phases, 6) + noise  # 24 residues
    for delta in (1, -1, 2, 3, -3):
        predicted = mechanism.cycle_prediction(intact, delta, stride)
        explicit = [phases[(r - delta) % stride] + (noise[(r - delta) % stride::stride]).mean()
                    for r in range(24)]  # fmt: skip
        np.testing.assert_allclose(predicted, explicit)
    # a cycle that moves the profile exactly as predicted, but keeps the boundary phase weak
    exact = mechanism.cycle_prediction(np.tile(phases, 6), 1, stride)
    fit = mechanism.cycle_fit(np.tile(phases, 6), exact, 1, stride)
    assert fit["r_squared"] == pytest.approx(1.0) and fit["r_squared_accuracy"] == pytest.approx(
        1.0
    )
    weak_boundary = exact.copy()
    weak_boundary[stride - 1 :: stride] = 0.1
    fit = mechanism.cycle_fit(np.tile(phases, 6), weak_boundary, 1, stride)
    assert fit["r_squared_without_boundary"] == pytest.approx(1.0)
    assert fit["r_squared"] < 0.9 and fit["boundary_accuracy"] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="--modulus"):
        mechanism.phase_profile(np.zeros(10), 4)


def test_cycling_report_on_two_seeds():
    cfg = LOOKUP_CFG
    checkpoints = [(cfg, params_of(cfg, s)) for s in (0, 1)]
    prompts = lookup.design("prefix", prompts_per_residue=2)
    out = mechanism.cycling(checkpoints, prompts, deltas=(1, -1))
    assert out["boundary_phase"] == 3 and set(out["deltas"]) == {"1", "-1"}
    for entry in out["deltas"].values():
        assert len(entry["seeds"]) == 2 and len(entry["r_squared"]) == 3
        assert len(entry["report"]["residue_accuracy"]) == 2
    with pytest.raises(ValueError, match="W = S"):
        mechanism.cycling([(cfg.replace(stride=2), None)], prompts)


# ----------------------------------------------------------------------------- over training


def counting(seed: int, batch: int, length: int, start: int):
    step = start
    while True:
        rng = np.random.default_rng([seed, step])
        first = rng.integers(0, 11, (batch, 1))
        yield ((first + np.arange(length + 1)[None]) % 11).astype(np.int32)
        step += 1


@pytest.mark.slow
def test_kept_checkpoints_give_the_gate_trajectory(tmp_path):
    cfg = config(layers=1, steps=4, log_every=2, checkpoint_every=2, batch=2, seeds=2,
                 val_batches=0, warmup=1)  # fmt: skip
    pretrain(cfg, out_dir=tmp_path, data=counting, keep_checkpoints=True)
    kept = mechanism.kept_checkpoints(tmp_path)
    assert [step for step, _ in kept] == [2, 4]
    tokens = tokens_of(cfg)
    trajectory = mechanism.gate_trajectory(tmp_path, tokens)
    assert trajectory["steps"] == [2, 4] and trajectory["seeds"] == [0, 1]
    static = np.asarray(trajectory["branches"]["key"]["static"])  # (steps, seeds, L, E)
    assert static.shape == (2, 2, 1, 2)
    final = checkpoint.load(checkpoint.seed_checkpoints(tmp_path)[1])
    direct = mechanism.gate_concentration(final[1], final[0], tokens)["branches"]["key"]["static"]
    np.testing.assert_array_equal(static[-1, 1], direct)
    assert not np.array_equal(static[0], static[1])  # training moved the gates


# ----------------------------------------------------------------------------- command line


def run_cli(capsys, *argv):
    from weakspots.cli import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["knockout", "--checkpoint", "/no/such/dir"], "--checkpoint"),
        (["gates", "--checkpoint", "/no/such/dir"], "--checkpoint"),
        (["cycle", "--checkpoint", "/no/such/dir"], "--checkpoint"),
        (["knockout", "--checkpoint", ".", "--calibration", "1"], "--calibration"),
        (["cycle", "--checkpoint", ".", "--padding", "middle"], "--padding"),
        (["cycle", "--checkpoint", ".", "--batch", "0"], "--batch"),
        (["gates", "--checkpoint", ".", "--rows", "0"], "--rows"),
    ],
)
def test_cli_bad_input_is_one_line_naming_the_flag(capsys, argv, flag):
    code, _, err = run_cli(capsys, "lm", *argv)
    assert code == 2 and f"error: {flag}" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_cli_verbs_on_a_tiny_pretrained_run(capsys, tmp_path):
    """`lm pretrain --keep-checkpoints` on the corpus for 2 steps, then the three verbs."""
    run = tmp_path / "run"
    code, _, err = run_cli(
        capsys, "lm", "pretrain", "--out", str(run), "--d-model", "16", "--layers", "1",
        "--heads", "2", "--head-dim", "8", "--mlp-hidden", "16", "--seq-len", "32",
        "--batch", "2", "--steps", "2", "--log-every", "1", "--checkpoint-every", "1",
        "--val-batches", "0", "--warmup", "1", "--seeds", "2", "--attention", "compressed",
        "--window", "4", "--stride", "4", "--local-window", "4", "--keep-checkpoints",
        "--quiet", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-1", "step-2"]
    design = ["--modulus", "4", "--prompts-per-residue", "2", "--json"]
    code, out, err = run_cli(capsys, "lm", "knockout", "--checkpoint", str(run), "--calibration",
                             "2", *design)  # fmt: skip
    assert code == 0, err
    report = json.loads(out)
    assert np.shape(report["change"]) == (2, 4) and report["calibration_prompts"] == 8
    assert "lm knockout: 6/6 evaluations" in err  # progress: 2 seeds x (intact + 2 units)
    code, out, err = run_cli(capsys, "lm", "cycle", "--checkpoint", str(run), "--deltas", "1",
                             "-1", *design)  # fmt: skip
    assert code == 0, err
    assert set(json.loads(out)["deltas"]) == {"1", "-1"}
    code, out, err = run_cli(capsys, "lm", "gates", "--checkpoint", str(run), "--over-training",
                             "--rows", "2", "--json", "--quiet")  # fmt: skip
    assert code == 0, err
    [result] = json.loads(out)["results"]
    assert result["steps"] == [1, 2] and result["seeds"] == [0, 1]
    code, out, err = run_cli(capsys, "lm", "gates", "--checkpoint", str(run / "seed-0"), "--rows",
                             "2", "--json")  # fmt: skip
    static = json.loads(out)["results"][0]["branches"]["value"]["static"]
    np.testing.assert_allclose(static, result["branches"]["value"]["static"][-1][0], rtol=1e-6)
    code, _, err = run_cli(capsys, "lm", "cycle", "--checkpoint", str(run), "--deltas", "0")
    assert code == 2 and "error: --deltas" in err
