"""Theory's predictions for one config, as plain JSON-able values: what `weakspots predict`
prints (`--json`) and `weakspots.predictions(...)` returns.

`predictions` gathers the toy's closed forms and semi-analytic predictions (d = inf, and
with `dim` the finite-d ones, `finite_d_predictions`); `footprint_predictions` and
`selection_predictions` those of the §9 models. Each calls theory's public functions
(`weakspots.theory`) and computes nothing of its own beyond choosing and arranging them.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from weakspots import theory

COVERAGE_SETTLE = 20000.0  # theory.predicted_coverage's default settling time
NOISE_SAMPLES = 2**13  # Monte Carlo problems for SGD's gradient noise at finite d


class PredictionFailed(RuntimeError):
    """A prediction came out non-finite or outside its range (e.g. an accuracy of 0)."""


def check_predictions(out: dict, chunks: int) -> dict:
    """Raise PredictionFailed unless every number is finite and every accuracy in (0, 1]."""
    for key, value in out.items():
        values = value if isinstance(value, list) else [value]
        numbers = [v for v in values if isinstance(v, float)]
        if any(not math.isfinite(v) for v in numbers):
            raise PredictionFailed(f"{key} is not finite: {value}")
    accuracy = out.get("predicted_phase_accuracy") or []
    if any(not 0.0 < a <= 1.0 for a in accuracy):
        raise PredictionFailed(
            f"predicted_phase_accuracy left (0, 1] ({min(accuracy):.3g}): the finite-d "
            f"quadrature over- or underflowed at this gain; try a smaller --gain"
        )
    return out


def _finite_or_none(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def predictions(
    stride,
    chunks,
    gain,
    heads=1,
    dim=None,
    loss="mse",
    init_scale=0.01,
    samples=128,
    lr=2.0,
    batch=256,
    steps=600,
    escape_boundary=False,
):
    """Every prediction of theory/ for one config, as plain JSON-able values.

    stride s, chunks N, gain beta, heads H, dim d (None: skip the finite-d part), loss
    "mse" | "ce", init_scale of the pooling logits, samples: starts for the support-size
    distribution and law; lr, batch, steps: the SGD run that the finite-d part describes;
    escape_boundary: bisect for N_esc (slow). Infinite values (no threshold, never
    specialises) are None. The top-level numbers are the d = inf theory except the
    accuracy and delta_max, which are at d when d is given: `dim_of` names the d of each.
    support_size_distribution integrates the d = inf flow from isotropic starts (a
    consistency check); support_size_law is the derived cut-local race
    (theory.support_size_law) for the starts init_scale describes, k -> P (H <= 2).
    For H = 1 the support size is the distribution's most probable k; for H >= 2 the
    phases per head of theory.predicted_coverage's most probable outcome. With d (one
    head, mse), `finite_d` holds the numbers at d: threshold N_c(d), lambda_d, stability,
    admissible sizes, the support from the L_d flow and its delta_max, SGD's median t*
    (theory.sgd_specialization_time); and escape_boundary (None without d): P(escape within
    steps) of SGD from uniform pooling (theory.escape_within) and, if asked, N_esc
    (theory.escape_boundary).
    """
    lam = float(theory.growth_rate(stride, chunks, gain, heads, loss))
    uniform_stable = not lam > 0
    out = {
        "critical_chunks": _finite_or_none(theory.critical_chunks(gain, stride, heads, loss)),
        "critical_gain": float(theory.critical_gain(chunks, stride, heads, loss)),
        "growth_rate": lam,
        "uniform_stable": uniform_stable,
        "stable_support_sizes": None,
        "specialization_time": _finite_or_none(
            theory.specialization_time(stride, chunks, gain, init_scale, heads, loss)
        ),
    }
    if heads == 1:
        if loss == "mse":
            out["stable_support_sizes"] = theory.stable_support_sizes(stride, chunks, gain).tolist()
        if uniform_stable:
            sizes, probs = np.array([stride]), np.array([1.0])
        else:
            sizes, probs, _ = theory.predicted_support_size(stride, chunks, gain, samples)
        k = int(sizes[np.argmax(probs)])
        out["predicted_support_size"] = k
        out["support_size_distribution"] = {
            str(int(a)): float(p) for a, p in zip(sizes, probs, strict=True)
        }
        weights = theory.support_weights(stride, k)[None]
    else:
        # theory.predicted_coverage's samples, kept: the accuracy needs one of the states
        weights = theory.sampled_final_weights(
            stride, chunks, gain, heads, loss, samples, settle=COVERAGE_SETTLE
        )
        outcomes = [theory.coverage_summary(w, stride) for w in weights]
        dist = {key: n / samples for key, n in Counter(outcomes).most_common()}
        top = next(iter(dist))
        out["predicted_support_size"] = list(top[0])
        out["support_size_distribution"] = {
            f"{'+'.join(map(str, key[0]))} uncovered {key[1]}": p for key, p in dist.items()
        }
        out["uncovered_phases"] = top[1]
        # the final state of the first sampled start with the most probable outcome
        first = weights[outcomes.index(top)]
        weights = np.where(theory.covered(first, stride), first, 0.0)
        weights = weights / weights.sum(axis=-1, keepdims=True)
    out["support_size_law"] = None
    if heads <= 2:
        law = theory.support_size_law(
            stride, chunks, gain, heads, loss, init_scale, samples=samples
        )["law"]
        out["support_size_law"] = {str(k): p for k, p in law.items()}
    out["predicted_phase_accuracy"] = None
    accuracy_dim = math.inf if dim is None else dim
    if heads == 1:
        accuracy = theory.phase_accuracy(weights[0], gain, chunks, accuracy_dim)
    else:
        accuracy = _heads_accuracy(weights, gain, chunks, accuracy_dim)
    if dim is not None:
        out["predicted_phase_accuracy"] = np.asarray(accuracy, float).tolist()
    out["predicted_delta_max"] = float(theory.delta_max(accuracy))
    at = "inf" if dim is None else dim
    out["dim_of"] = {key: "inf" for key in out} | {
        "predicted_phase_accuracy": at,
        "predicted_delta_max": at,
    }
    out["finite_d"] = out["escape_boundary"] = None
    if dim is not None and heads == 1 and loss == "mse":
        out["finite_d"] = finite_d_predictions(
            stride, chunks, gain, dim, init_scale, samples, lr, batch, steps, escape_boundary
        )
        out["escape_boundary"] = out["finite_d"].pop("escape_boundary")
        out["dim_of"] |= {"finite_d": dim, "escape_boundary": dim}
    return out


def finite_d_predictions(
    stride, chunks, gain, dim, init_scale, samples, lr, batch, steps, escape_boundary=False
):
    """The predictions at key dimension d (one head, mse), as plain JSON-able values.

    critical_chunks: N_c(d) (theory.critical_chunks_finite_d); growth_rate: lambda_d;
    uniform_stable: lambda_d <= 0; stable_support_sizes at d; predicted_support_size and
    support_size_distribution: the flow of L_d from `samples` isotropic starts
    (theory.predicted_support_size(dim=d)); predicted_delta_max of that k-state at d;
    specialization_time_sgd: SGD's median t* at (lr, batch) with gradient noise
    (theory.sgd_specialization_time; None where uniform is stable at d); escape_boundary:
    lr, batch, steps, p_escape (theory.escape_within) and chunks = N_esc (None unless
    escape_boundary).
    """
    lam = theory.growth_rate_finite_d(stride, chunks, gain, dim)
    sizes, probs, admissible = theory.predicted_support_size(
        stride, chunks, gain, samples=samples, dim=dim
    )
    k = int(sizes[np.argmax(probs)])
    profile = theory.phase_accuracy_profile(stride, chunks, k, dim)
    onset = None
    if lam > 0:
        noise = theory.uniform_moments(stride, chunks, dim, gain, samples=NOISE_SAMPLES)
        onset = theory.sgd_specialization_time(
            stride, chunks, gain, init_scale, dim, lr, batch, moments=noise
        )["time"]
    boundary = {
        "lr": lr,
        "batch": batch,
        "steps": steps,
        "p_escape": theory.escape_within(
            stride, chunks, gain, dim, lr, batch, steps, samples=NOISE_SAMPLES
        ),
        "chunks": None,
    }
    if escape_boundary:
        found = theory.escape_boundary(stride, gain, dim, lr, batch, steps)
        boundary["chunks"] = found["chunks"]
    return {
        "dim": dim,
        "critical_chunks": _finite_or_none(theory.critical_chunks_finite_d(gain, stride, dim)),
        "growth_rate": lam,
        "uniform_stable": not lam > 0,
        "stable_support_sizes": np.asarray(admissible).tolist(),
        "predicted_support_size": k,
        "support_size_distribution": {
            str(int(a)): float(p) for a, p in zip(sizes, probs, strict=True)
        },
        "predicted_delta_max": float(theory.delta_max(profile)),
        "specialization_time_sgd": None if onset is None else _finite_or_none(onset),
        "escape_boundary": boundary,
    }


def _heads_accuracy(weights, gain, chunks, dim):
    if math.isinf(dim):
        covered = (weights > 0).any(axis=0)
        return np.where(covered, 1.0, 1.0 / chunks)
    # The head-averaged readout argmax_c mean_h P_h[c] (theory.interventions), not the best head.
    return theory.readout_accuracy(weights, gain, chunks, dim)


def footprint_predictions(stride: int, window: int, chunks: int, carry_gain, decoy_gain) -> dict:
    """The footprint model's predictions under flat carry, mean pooling, nu = 1 (docs/theory.md §9.4).

    carry_gain g = beta c / s, decoy_gain g_D = beta_D / s. Evaluated from the §9.4
    definitions (theory.footprint_phase_logit, footprint_retrieval), with the closed forms
    beside them. Returns a dict of plain values.
    """
    s = int(stride)
    alpha = np.full(s, 1.0 / s)
    carry = theory.footprint_flat_carry(window)
    gain, key_gain = carry_gain * s, decoy_gain * s
    m_eff = theory.footprint_phase_logit(alpha, s, carry, gain, key_gain)
    retrieval = theory.footprint_retrieval(alpha, s, chunks, carry, gain, key_gain)
    ratio = theory.footprint_allocation_ratio(alpha, s, carry, gain, key_gain)
    q, rho = divmod(int(window), s)
    out = {
        "model": "footprint",
        "phase_logit": m_eff.tolist(),
        "retrieval": retrieval.tolist(),
        "weakest_phase": int(np.argmin(retrieval)),
        "retrieval_gap": float(retrieval.max() - retrieval.min()),
        "phase_logit_gap": float(m_eff.max() - m_eff.min()),
        "entries_holding_fact": theory.footprint_entry_count(s, window).tolist(),
        "allocation_ratio": [None if math.isnan(v) else float(v) for v in ratio],
        "allocation_law": theory.footprint_allocation_law(s, carry_gain, decoy_gain).tolist(),
        "weakest_phase_closed_form": (
            theory.footprint_weakest_phase(s, window, carry_gain, decoy_gain)
            if q >= 1 and carry_gain > 0
            else None
        ),
        "weakest_phase_wrapped": (
            theory.footprint_weakest_phase_wrapped(s, window, carry_gain, decoy_gain)
            if q >= 1 and rho > 0 and carry_gain > 0
            else None
        ),
        "gap_bound": (
            theory.footprint_gap_bound(q, key_gain / s) if rho == 0 and q >= 2 else None
        ),
        "growth_rate": theory.footprint_growth_rate(s, chunks, carry, gain, key_gain),
    }
    return out


def selection_predictions(stride: int, chunks: int, topk: int, dim, weights) -> dict:
    """The selection model's predictions for a toy indexer with pooling weights `weights`
    (docs/theory.md §9.5): the miss probability by phase, exact at finite `dim` (d = inf:
    every needle with weight > 0 is selected), its step form, the step's place and width,
    and acc(phi) with a mean-pooling readout. Returns a dict of plain values."""
    s = int(stride)
    out = {
        "model": "selection",
        "step_location": theory.topk_step_location(chunks, topk),
        "step_width": theory.topk_step_width(chunks, topk) if topk < chunks else 0.0,
    }
    if dim is None or topk >= chunks:
        miss = np.where(weights > 0, 0.0, 1.0 - topk / chunks) if topk < chunks else np.zeros(s)
        out["miss_probability"] = miss.tolist()
        return out
    mu, sigma = theory.topk_indexer_margin(weights, dim)
    miss = theory.topk_phase_miss_probability(weights, chunks, topk, dim)
    out["indexer_mean"] = mu.tolist()
    out["indexer_sd"] = sigma.tolist()
    out["miss_probability"] = miss.tolist()
    out["miss_probability_step"] = theory.topk_miss_probability_step(mu, sigma, chunks, topk).tolist()
    out["accuracy"] = theory.topk_accuracy(weights, np.full(s, 1.0 / s), chunks, topk, dim).tolist()
    out["miss_gap"] = float(miss.max() - miss.min())
    return out


def induction_predictions(config, positions=None, sgd=None) -> dict:
    """`predict --model induction`'s output for `config` (an `idealized.induction.InductionConfig`;
    docs/induction.md): with `positions`, the loss and per-phase accuracy of that one-hot
    assignment; without, the optimum (Theorem 1), its loss, the collision cost and
    coefficient; with both, the coverage law of m heads from a small start, the growth rate
    and the eps bound. `coverage_distribution` (k = 0..m) is the flow's occupancy law, or with
    `sgd` (an `InductionTrainConfig`: lr, batch, init_scale, steps) SGD's, whose minibatch
    noise all heads share (`theory.induction_sgd_coverage_distribution`, docs/induction.md §9)."""
    s, m, big_l, n = config.stride, config.heads, config.chunks, config.vocab
    g, b = config.gamma, config.beta
    out: dict = {"model": "induction"}
    if positions is not None:
        acc = theory.induction_assignment_phase_accuracy(positions, s, big_l, g, b)
        out |= {
            "positions": list(positions),
            "loss": theory.induction_assignment_loss(positions, s, big_l, n, g, b),
            "phase_accuracy": acc.tolist(),
            "delta_max": theory.induction_delta_max(acc),
        }
        m = len(positions)
    else:
        best, optima = theory.induction_optimal_assignments(m, s, big_l, n, g, b)
        out |= {"optimal_loss": best, "optimal_assignments": [list(a) for a in optima]}
        if 2 <= m <= s - 1:
            out |= {
                "collision_cost": theory.induction_collision_cost(m, s, big_l, n, g, b),
                "collision_coefficient": theory.induction_collision_coefficient(m, s, big_l, g, b),
            }
    occupancy = theory.induction_coverage_distribution(m, s)
    coverage = occupancy
    if sgd is not None:
        hyper = (sgd.lr, sgd.batch, sgd.init_scale, sgd.steps)
        own = {"head_batches": sgd.head_batches}
        coverage = theory.induction_sgd_coverage_distribution(m, s, big_l, n, g, b, *hyper, **own)
        out["coverage_law"] = "sgd, a batch per head" if sgd.head_batches else "sgd"
        out["occupancy_distribution"] = occupancy.tolist()
        out["shared_noise_ratio"] = (
            theory.induction_shared_noise_ratio(m, s, big_l, n, g, b, *hyper, **own)
            if m >= 2
            else 0.0
        )
    else:
        out["coverage_law"] = "occupancy"
    out |= {
        "coverage_distribution": coverage.tolist(),
        "expected_uncovered": (
            theory.induction_expected_uncovered(m, s)
            if sgd is None
            else float(np.sum(coverage * (s - 1 - np.arange(m + 1))))
        ),
        "pair_coupling": theory.induction_pair_coupling(s, big_l, g, b),
        "growth_rate": theory.induction_pair_growth_rate(s, big_l, g, b),
        "concentration_slope": theory.induction_concentration_slope(s, big_l, g, b),
        "eps_loss_bound": theory.induction_eps_bound(m, g, b, config.eps),
    }
    return out
