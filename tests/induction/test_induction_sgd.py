"""The SGD coverage law (theory.induction_sgd): its noise against the trainer's own batch
gradients, its limits (the occupancy law as lr -> 0, one position under strong shared noise),
its symmetry, and `predict --model induction --lr`."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots import theory
from weakspots.cli import main
from weakspots.idealized import induction

# Physics unlike the canonical config, so nothing here was seen while deriving.
S, M, L, N, GAMMA, BETA = 5, 2, 6, 2048, 5.0, 1.5


def test_one_step_covariance_is_the_trainers_batch_gradient_covariance():
    # From a start of std 1e-6 one step's fluctuation is lr times the batch gradient's
    # deviation; a Monte Carlo of the trainer's own batch loss (queries drawn as it draws
    # them, the contexts and chunks included) must give the same covariance.
    batch, draws = 16, 20000
    f = theory.induction_fluctuation_covariance(M, S, L, N, GAMMA, BETA, 1.0, batch, 1e-6, 1)
    predicted = f["covariance"] * np.exp(f["log_scale"])
    config = induction.InductionConfig(stride=S, heads=M, chunks=L, vocab=N, gamma=GAMMA, beta=BETA)
    sc = induction.scales(config)
    gates = induction.StaticGates(jnp.zeros((M, 2, S)))

    with jax.enable_x64(True):

        def gradient(key):
            chunk, position = induction.sample_queries(key, config, batch)
            contexts = jnp.zeros((batch, L, S), jnp.int32)
            grad = jax.grad(induction.batch_loss)(gates, contexts, chunk, position, sc)
            return grad.logits.reshape(-1)

        g = np.asarray(jax.jit(jax.vmap(gradient))(jax.random.split(jax.random.key(7), draws)))
    measured = np.cov(g, rowvar=False)
    error = np.linalg.norm(measured - predicted) / np.linalg.norm(predicted)
    assert error < 0.04  # Monte Carlo: about sqrt(2 / draws) per direction, 1%


def test_the_law_is_the_occupancy_law_as_lr_goes_to_zero():
    # The shared part scales as lr / (B rho^2): lr = 0.01 from rho = 0.1 (flow time 20)
    # leaves it near 1e-3 of the start's, so the heads select independently.
    args = (3, 4, 8, 4096, 6.0, 2.0, 0.01, 256, 0.1, 2000)
    law = theory.induction_sgd_coverage_distribution(*args)
    occupancy = theory.induction_coverage_distribution(3, 4)
    assert 0.5 * np.abs(law - occupancy).sum() < 0.01  # Monte Carlo of 2^16 draws
    assert theory.induction_shared_noise_ratio(*args) < 0.01


def test_strong_shared_noise_puts_every_head_on_one_position():
    law = theory.induction_sgd_coverage_distribution(
        M + 1, S, L, N, GAMMA, BETA, 1.0, 16, 1e-6, 400
    )
    assert law[1] > 0.9


def test_the_shared_part_falls_as_one_over_the_batch():
    # The shared noise enters the covariance as lr^2 G^T C G with C ~ 1/B. The heads' modes
    # also couple, without noise, through the normaliser (an O(1/N) repulsion that does not
    # depend on B), so the ratio is a/B - b: its successive differences halve as B doubles.
    args = (M, S, L, N, GAMMA, BETA, 0.5)
    r = [theory.induction_shared_noise_ratio(*args, b, 0.1, 400) for b in (256, 512, 1024)]
    assert (r[0] - r[1]) / (r[1] - r[2]) == pytest.approx(2.0, rel=0.02)


def test_heads_are_exchangeable_in_the_covariance():
    f = theory.induction_fluctuation_covariance(3, S, L, N, GAMMA, BETA, 1.0, 64, 0.01, 300)
    d = 2 * S
    c = f["covariance"]
    blocks = [c[h * d : (h + 1) * d, h * d : (h + 1) * d] for h in range(3)]
    across = [c[0:d, d : 2 * d], c[d : 2 * d, 2 * d : 3 * d], c[0:d, 2 * d : 3 * d]]
    scale = np.abs(blocks[0]).max()
    for b in blocks[1:]:
        np.testing.assert_allclose(b, blocks[0], atol=1e-9 * scale)
    for b in across[1:]:
        np.testing.assert_allclose(b, across[0], atol=1e-9 * scale)
    assert np.linalg.eigvalsh(c).min() > -1e-12 * scale


def _predict(capsys, *extra):
    argv = [
        "predict",
        "--model",
        "induction",
        "--stride",
        str(S),
        "--heads",
        str(M),
        "--chunks",
        str(L),
        "--vocab",
        str(N),
        "--gamma",
        str(GAMMA),
        "--beta",
        str(BETA),
        *extra,
        "--json",
    ]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_predict_with_lr_gives_the_sgd_law_and_without_it_the_occupancy_law(capsys):
    out = _predict(
        capsys, "--lr", "0.5", "--batch", "128", "--init-scale", "0.05", "--steps", "300"
    )
    law = theory.induction_sgd_coverage_distribution(M, S, L, N, GAMMA, BETA, 0.5, 128, 0.05, 300)
    assert out["coverage_law"] == "sgd"
    np.testing.assert_array_equal(out["coverage_distribution"], law)
    assert out["expected_uncovered"] == pytest.approx(
        float(np.sum(law * (S - 1 - np.arange(M + 1))))
    )
    plain = _predict(capsys)
    assert plain["coverage_law"] == "occupancy"
    np.testing.assert_allclose(
        plain["coverage_distribution"], theory.induction_coverage_distribution(M, S)
    )


def test_predict_left_out_sgd_flags_take_the_induction_trainers_defaults(capsys):
    d = induction.InductionTrainConfig()
    out = _predict(capsys, "--lr", "0.5")
    law = theory.induction_sgd_coverage_distribution(
        M, S, L, N, GAMMA, BETA, 0.5, d.batch, d.init_scale, d.steps
    )
    np.testing.assert_array_equal(out["coverage_distribution"], law)


@pytest.mark.parametrize(
    "extra,flag",
    [
        (["--batch", "64"], "--batch"),
        (["--lr", "1", "--init-scale", "0"], "--init-scale"),
        (["--lr", "1", "--gate", "loglinear"], "--lr"),
        (["--lr", "-1"], "--lr"),
    ],
)
def test_bad_sgd_flags_exit_2_naming_the_flag(capsys, extra, flag):
    assert main(["predict", "--model", "induction", *extra]) == 2
    err = capsys.readouterr().err
    assert flag in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "verb,config",
    [("train", induction.InductionTrainConfig()), ("flow", induction.InductionFlowConfig())],
)
def test_help_after_model_induction_shows_the_induction_defaults(capsys, verb, config):
    with pytest.raises(SystemExit):
        main([verb, "--model", "induction", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    names = ["stride", "heads", "chunks"] + (
        ["lr", "batch", "steps"] if verb == "train" else ["t1"]
    )
    for name in names:
        flag = "--" + name.replace("_", "-")
        assert f"{flag} {name.upper()} " in text
        shown = text.split(f"{flag} {name.upper()} ", 1)[1].split("(default: ", 1)[1].split(")")[0]
        assert float(shown) == float(getattr(config, name)), name


def test_a_batch_per_head_leaves_no_noise_across_heads():
    args = (3, S, L, N, GAMMA, BETA, 1.0, 64, 1e-6, 1)
    shared = theory.induction_fluctuation_covariance(*args)
    own = theory.induction_fluctuation_covariance(*args, head_batches=True)
    d = 2 * S
    a = shared["covariance"] * np.exp(shared["log_scale"])
    b = own["covariance"] * np.exp(own["log_scale"])
    scale = np.abs(a).max()
    for h in range(3):
        block = slice(h * d, (h + 1) * d)
        np.testing.assert_allclose(b[block, block], a[block, block], atol=1e-9 * scale)
    assert np.abs(a[0:d, d : 2 * d]).max() > 0.1 * scale  # one batch: the heads share its noise
    assert np.abs(b[0:d, d : 2 * d]).max() < 1e-12 * scale


def test_strong_noise_with_a_batch_per_head_keeps_the_occupancy_law():
    law = theory.induction_sgd_coverage_distribution(
        M + 1, S, L, N, GAMMA, BETA, 1.0, 16, 1e-6, 400, head_batches=True
    )
    occupancy = theory.induction_coverage_distribution(M + 1, S)
    assert 0.5 * np.abs(law - occupancy).sum() < 0.03


def test_a_batch_per_head_steps_as_one_batch_when_batches_are_huge():
    # Either way the step is the population gradient plus O(1/sqrt(B)) noise: with B = 2^16
    # the two trainers end 40 steps from one start within that noise of each other.
    from weakspots.sims.induction.train import train_runs

    config = induction.InductionTrainConfig(
        stride=S, heads=M, chunks=L, vocab=N, gamma=GAMMA, beta=BETA, init_scale=0.3,
        lr=1.0, batch=2**16, steps=40, eval_every=40,
    )  # fmt: skip
    history = train_runs(config, [3])
    one = history.weights[0, -1]
    own = train_runs(config.replace(head_batches=True), [3]).weights[0, -1]
    assert np.abs(one - history.weights[0, 0]).max() > 0.05  # the gates did move
    np.testing.assert_allclose(own, one, atol=0.01)
