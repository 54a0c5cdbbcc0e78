"""The induction model's closed forms against a brute-force evaluation of the model as
PAPER.md §5 defines it: explicit embedding vectors, a literal context, every query, the
softmax over all N tokens (numpy, no code shared with weakspots)."""

import itertools
import json
import math

import numpy as np
import pytest

from weakspots import theory
from weakspots.cli import main

RTOL = 1e-9


def embeddings(vocab: int, kappa: float) -> np.ndarray:
    """x_n = sqrt(kappa) u + e_n in R^{N+1}: Gram kappa 11^T + I."""
    x = np.zeros((vocab, vocab + 1))
    x[:, 0] = math.sqrt(kappa)
    x[np.arange(vocab), np.arange(vocab) + 1] = 1.0
    return x


def brute_force(key_w, value_w, chunks, vocab, gamma, beta, kappa=0.3, gram=None, seed=0):
    """(loss, accuracy per query position) of static gates on one random context, every query
    (l*, r*) evaluated literally; with `gram`, the model read through that Gram matrix."""
    key_w, value_w = np.asarray(key_w, float), np.asarray(value_w, float)
    heads, s = key_w.shape
    rng = np.random.default_rng(seed)
    tokens = rng.choice(vocab, size=(chunks, s), replace=False)
    g = embeddings(vocab, kappa) @ embeddings(vocab, kappa).T if gram is None else gram
    loss, hits = 0.0, np.zeros(s - 1)
    for l_star, r_star in itertools.product(range(chunks), range(s - 1)):
        q = tokens[l_star, r_star]
        out = np.zeros(vocab)  # x_n . O for every n
        for h in range(heads):
            scores = np.array([gamma * sum(key_w[h, r] * g[q, tokens[c, r]] for r in range(s)) for c in range(chunks)])
            a = np.exp(scores - scores.max())
            a /= a.sum()
            for c in range(chunks):
                out += a[c] * sum(value_w[h, r] * g[:, tokens[c, r]] for r in range(s))
        z = beta * out
        target = tokens[l_star, r_star + 1]
        loss += -(z[target] - z.max()) + math.log(np.exp(z - z.max()).sum())
        top = np.flatnonzero(z == z.max())
        hits[r_star] += (target in top) / top.size
    return loss / (chunks * (s - 1)), hits / chunks


def one_hot(positions, s):
    k = np.zeros((len(positions), s))
    v = np.zeros((len(positions), s))
    for h, r in enumerate(positions):
        k[h, r] = v[h, r + 1] = 1.0
    return k, v


def test_the_issues_numbers():
    assert theory.induction_assignment_loss((0, 1), 4, 8, 4096, 6.0, 2.0) == pytest.approx(7.008916, abs=5e-7)
    assert theory.induction_assignment_loss((0, 0), 4, 8, 4096, 6.0, 2.0) == pytest.approx(7.012067, abs=5e-7)
    assert theory.induction_collision_coefficient(2, 4, 8, 6.0, 2.0) == pytest.approx(13.0, abs=0.01)


# configs never used while the code was written
UNSEEN = [
    (5, (0, 2, 2), 3, 40, 3.7, 1.3, 0.6),
    (6, (4, 1, 1, 0), 4, 61, 2.2, 0.9, 0.0),
    (3, (1, 1), 5, 17, 5.1, 2.4, 1.7),
]


@pytest.mark.parametrize("s,positions,chunks,vocab,gamma,beta,kappa", UNSEEN)
def test_assignment_loss_and_accuracy_match_brute_force(s, positions, chunks, vocab, gamma, beta, kappa):
    k, v = one_hot(positions, s)
    loss, acc = brute_force(k, v, chunks, vocab, gamma, beta, kappa)
    assert theory.induction_assignment_loss(positions, s, chunks, vocab, gamma, beta) == pytest.approx(loss, rel=RTOL)
    assert theory.induction_population_loss(k, v, chunks, vocab, gamma, beta) == pytest.approx(loss, rel=RTOL)
    np.testing.assert_array_equal(theory.induction_assignment_phase_accuracy(positions, s, chunks, gamma, beta), acc)


@pytest.mark.parametrize("s,positions,chunks,vocab,gamma,beta,kappa", UNSEEN)
def test_predict_json_matches_brute_force(capsys, s, positions, chunks, vocab, gamma, beta, kappa):
    flags = ["--stride", s, "--chunks", chunks, "--vocab", vocab, "--gamma", gamma, "--beta", beta]
    argv = ["predict", "--model", "induction", *map(str, flags), "--positions", ",".join(map(str, positions)), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    loss, acc = brute_force(*one_hot(positions, s), chunks, vocab, gamma, beta, kappa)
    assert out["loss"] == pytest.approx(loss, rel=RTOL)
    assert out["phase_accuracy"] == acc.tolist()
    assert out["delta_max"] == acc.max() - acc.min()


def test_population_loss_of_spread_gates_matches_brute_force():
    rng = np.random.default_rng(3)
    s, heads = 4, 3
    k = rng.dirichlet(np.ones(s), heads)
    v = rng.dirichlet(np.ones(s), heads)
    loss, _ = brute_force(k, v, 3, 29, 4.4, 1.8, kappa=0.9)
    assert theory.induction_population_loss(k, v, 3, 29, 4.4, 1.8) == pytest.approx(loss, rel=RTOL)


def test_collision_cost_times_n_follows_the_derived_expansion():
    """N (L_c - L_d) by brute force at several N against c1 + c2/N, within the bound on the rest."""
    s, m, chunks, gamma, beta = 3, 2, 2, 2.5, 1.1
    c1 = theory.induction_collision_coefficient(m, s, chunks, gamma, beta)
    c2 = theory.induction_collision_second_order(m, s, chunks, gamma, beta)
    fc = theory.induction_normaliser_excess((0, 0), s, chunks, gamma, beta)
    fd = theory.induction_normaliser_excess((0, 1), s, chunks, gamma, beta)
    for n in (50, 200, 800):
        lc, _ = brute_force(*one_hot((0, 0), s), chunks, n, gamma, beta, kappa=0.2)
        ld, _ = brute_force(*one_hot((0, 1), s), chunks, n, gamma, beta, kappa=0.2)
        rest = np.mean(np.abs(fc) ** 3 + np.abs(fd) ** 3) / (3 * n**2) / (1 - max(fc.max(), fd.max()) / n)
        assert abs(n * (lc - ld) - (c1 + c2 / n)) <= rest + 1e-9
    assert c1 > 0


def test_theorem_one_optima_are_distinct():
    for s, m in ((4, 2), (4, 3), (5, 3), (6, 2)):
        _, optima = theory.induction_optimal_assignments(m, s, 8, 4096, 6.0, 2.0)
        assert optima and all(len(set(a)) == m for a in optima)
        assert len(optima) == math.comb(s - 1, m)


@pytest.mark.parametrize("heads,stride", [(1, 4), (2, 4), (3, 4), (5, 4), (3, 6)])
def test_coverage_law_against_sampled_uniform_selections(heads, stride):
    law = theory.induction_coverage_distribution(heads, stride)
    assert law.sum() == pytest.approx(1.0, abs=1e-12)
    picks = np.random.default_rng(0).integers(0, stride - 1, size=(200_000, heads))
    distinct = np.array([len(set(row)) for row in picks[:20000]])
    freq = np.bincount(distinct, minlength=heads + 1) / distinct.size
    np.testing.assert_allclose(freq, law, atol=4 * np.sqrt(0.25 / distinct.size))
    expected = sum((stride - 1 - k) * p for k, p in enumerate(law))
    assert theory.induction_expected_uncovered(heads, stride) == pytest.approx(expected, rel=1e-12)


def test_selected_position_is_the_largest_pair_sum():
    key = np.array([[0.1, 0.5, -0.2, 0.9]])
    value = np.array([[0.0, -0.3, 0.1, 0.2]])
    # pairs (0,1): -0.2, (1,2): 0.6, (2,3): 0.0 -> position 1 (the final key is no pair)
    assert theory.induction_selected_positions(key, value).tolist() == [1]


def test_eps_bound_holds_for_a_perturbed_gram():
    s, chunks, vocab, gamma, beta, kappa, eps = 4, 3, 30, 3.0, 1.5, 0.4, 0.01
    rng = np.random.default_rng(5)
    k = rng.dirichlet(np.ones(s), 2)
    v = rng.dirichlet(np.ones(s), 2)
    noise = rng.uniform(-eps, eps, (vocab, vocab))
    noise = np.triu(noise, 1) + np.triu(noise, 1).T
    x = embeddings(vocab, kappa)
    gram = x @ x.T + noise
    l0, _ = brute_force(k, v, chunks, vocab, gamma, beta, kappa, seed=1)
    le, _ = brute_force(k, v, chunks, vocab, gamma, beta, kappa, gram=gram, seed=1)
    bound = theory.induction_eps_bound(2, gamma, beta, eps)
    assert 0 < abs(le - l0) <= bound


def test_pair_coupling_is_the_loss_mixed_derivative():
    """c of theory.induction_pair_coupling against the mixed finite difference of the closed-form
    loss of one head at uniform gates: key mode t_K (e_0 - e_1), value mode t_V (e_1 - e_2),
    whose coupling is -c sum_r u_r w_r = -2 c t_K t_V."""
    s, chunks, vocab, gamma, beta = 4, 8, 10**9, 6.0, 2.0

    def loss(tk, tv):
        logits_k, logits_v = np.zeros(s), np.zeros(s)
        logits_k[[0, 1]] += [tk, -tk]
        logits_v[[1, 2]] += [tv, -tv]
        k = np.exp(logits_k) / np.exp(logits_k).sum()
        v = np.exp(logits_v) / np.exp(logits_v).sum()
        return theory.induction_population_loss(k[None], v[None], chunks, vocab, gamma, beta)

    h = 1e-3
    mixed = (loss(h, h) - loss(h, -h) - loss(-h, h) + loss(-h, -h)) / (4 * h**2)
    assert -mixed / 2 == pytest.approx(theory.induction_pair_coupling(s, chunks, gamma, beta), rel=1e-5)


@pytest.mark.parametrize("gamma,beta", [(6.0, 2.0), (3.0, 5.0)])
def test_pair_growth_rate_from_the_full_closed_form(gamma, beta):
    """The rate (leading-order head loss, emptied positions at -inf) against the top
    eigenvalue of minus the Hessian of the full closed form (N = 1e12, emptied logits at -40)
    on the zero-sum pair modes, built here from its own basis."""
    s, chunks = 4, 8

    def loss(y):
        k = np.concatenate([y[:3], [-40.0]])
        v = np.concatenate([[-40.0], y[3:]])
        pk, pv = np.exp(k) / np.exp(k).sum(), np.exp(v) / np.exp(v).sum()
        return theory.induction_population_loss(pk[None], pv[None], chunks, 1e12, gamma, beta)

    zero_sum = np.array([[1, -1, 0], [1, 1, -2]]) / np.array([[np.sqrt(2)], [np.sqrt(6)]])
    basis = [np.concatenate([z, 0 * z]) for z in zero_sum] + [np.concatenate([0 * z, z]) for z in zero_sum]
    h = 1e-4
    hess = np.array([[
        (loss(h * (a + b)) - loss(h * (a - b)) - loss(h * (b - a)) + loss(-h * (a + b))) / (4 * h * h)
        for b in basis] for a in basis])
    top = np.linalg.eigvalsh(-hess).max()
    assert theory.induction_pair_growth_rate(s, chunks, gamma, beta, emptied=True) == pytest.approx(top, rel=1e-4)
