"""Escape of SGD from metastable uniform pooling at finite d (docs/theory.md §7.11, §9.2).

Where uniform pooling is a local minimum of the finite-d loss L_d but an (s-1)-phase state
lies lower past a saddle, SGD's gradient noise carries runs over the saddle. Derivation
(one head, fixed gain, SGD with learning rate eta and batch B, time t = eta n;
docs/theory_derivations.md §2):

1. Saddles. By phase symmetry there are s equivalent saddles, one per phase to drop, each
   on the line a = -u e_j (phase j's logit lowered, the others equal): the fixed set of the
   permutations of the other s - 1 phases, which the gradient respects. Along it, with
   x = u sqrt(1 - 1/s) the unit-speed zero-sum coordinate: the loss U(x) and curvature
   U''(x) (L_d, theory.finite_d, through theory.support's interpolant), the per-problem
   gradient variance c(x) along the line, and on the s - 2 transverse zero-sum directions
   (equal by symmetry) the curvature mu(x) and noise c_perp(x) (theory.gradient_noise).
2. Transverse modes, adiabatically eliminated. At fixed x a transverse mode is the discrete
   OU recursion y <- (1 - eta mu) y - eta xi, whose stationary variance is
   v(x) = eta c_perp / (B mu (2 - eta mu)) (exact for the discrete recursion). Through
   U(x, y) = U(x) + mu(x) |y|^2 / 2 they push on x with the mean force
   -(s - 2) mu'(x) v(x) / 2.
3. The coordinate along the line is then the 1-D chain x <- x + eta f(x) - eta xi_x with
   f = -U' - (s - 2) mu' v / 2 and Var(eta xi_x) = eta^2 c / B, i.e. temperature
   T(x) = eta c(x) / (2 B) in time t. The diffusion whose time-eta map matches the chain
   (locally linear, z = eta f'): drift f log(1 + z)/z and diffusion T log(1 + z)/(z (1 + z/2)),
   to O(eta) the weak second-order modified equation f - (eta/2) f f', T (1 - eta f'), plus
   its O(eta) terms -(eta/2) T f'' and -(eta/2) f T' (_modified_diffusion). This carries the
   step size into the passage.
4. Passage. The Fokker-Planck equation of that 1-D diffusion, from uniform pooling, with
   the well's far side reflecting and the path's end absorbing, gives the survival S(t)
   (passage_survival: one dimension, a matrix exponential); the s saddles compete
   independently: P(escaped by t) = 1 - S(t)^s. Its mean first-passage time tau (one
   quadrature, first_passage_time) gives the rate R = s / tau of the exponential law that
   this approaches once the barrier is several temperatures (escape_rate).

At a high barrier, constant noise and constant transverse curvature this is Kramers-Langer
over s saddles (kramers_rate). The line, its curvatures and noise assume the transverse
displacement stays small, i.e. temperatures well below the transverse curvatures.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from weakspots.idealized.precision import float64_module
from weakspots.idealized.xla import jit

from .finite_d import critical_chunks_finite_d, growth_rate_finite_d
from .gradient_noise import loss_derivatives, problem_gradients, problem_sample
from .support import interpolated_finite_d_loss, per_phase_loss_coefficients

DRAWS = 20000  # Gaussian draws for the delta_max mixture


def kramers_rate(barrier, temperature, well_curvatures, saddle_curvatures):
    """Kramers-Langer (Eyring) escape rate over one saddle of overdamped Langevin dynamics.

    dx = -grad U dt + sqrt(2 T) dW in m dimensions; barrier = U(saddle) - U(well);
    well_curvatures: the m Hessian eigenvalues at the well (all > 0); saddle_curvatures:
    the m at the saddle, exactly one < 0 (lambda_u).
    rate = |lambda_u| / (2 pi) sqrt(prod well / |prod saddle|) exp(-barrier / T)
    (Langer 1969; asymptotic for barrier >> T). Returns a float (per unit time).
    """
    well = np.asarray(well_curvatures, float)
    saddle = np.asarray(saddle_curvatures, float)
    unstable = saddle[saddle < 0]
    if np.any(well <= 0) or len(unstable) != 1:
        raise ValueError("need a minimum (all well curvatures > 0) and an index-1 saddle")
    ratio = np.prod(well) / abs(np.prod(saddle))
    return float(
        abs(unstable[0]) / (2 * math.pi) * math.sqrt(ratio) * math.exp(-barrier / temperature)
    )


def first_passage_time(x, drift, diffusion, weight=None):
    """Mean first-passage time of a 1-D Ito diffusion from x[0] (reflecting) to x[-1].

    x: (n,) increasing grid; drift f(x) and diffusion D(x) on it (dx = f dt + sqrt(2D) dW);
    weight: an extra stationary factor (the transverse modes' partition function, default 1).
    tau = int dy / (D rho) int_{x0}^{y} rho, rho = weight exp(-Phi) / D, Phi' = -f / D
    (Gardiner, Handbook of Stochastic Methods, 5.2.7), trapezoidal on the grid; the start
    point inside [x0, x1] does not matter once the well is deep compared with D.
    Returns a float.
    """
    x, f, dif = (np.asarray(v, float) for v in (x, drift, diffusion))
    w = np.ones_like(x) if weight is None else np.asarray(weight, float)

    def integral(y):
        return np.concatenate([[0.0], np.cumsum(0.5 * (y[1:] + y[:-1]) * np.diff(x))])

    phi = -integral(f / dif)
    log_rho = np.log(w) - phi - np.log(dif)
    # rho spans hundreds of e-folds past the saddle: accumulate its mass in log space
    pieces = np.logaddexp(log_rho[1:], log_rho[:-1]) + np.log(0.5 * np.diff(x))
    log_mass = np.logaddexp.accumulate(pieces)
    inner = np.concatenate([[0.0], np.exp(log_mass - log_rho[1:] - np.log(dif[1:]))])
    return float(integral(inner)[-1])


def escape_path(
    stride, chunks, dim, gain, loss="mse", drops=None, samples=2**18, seed=0, block=2**14
):
    """Loss, curvatures and gradient noise along dropping one phase (module section above).

    stride s, chunks N, dim d (finite), gain beta, loss; drops: the values u of the path
    a = -u e_j (default -0.2 .. 1.5 in steps of 0.1); Monte Carlo on `samples` problems
    from `seed`, in blocks of `block`. Returns a dict of (n,) arrays: drop u, x (the
    unit-speed zero-sum coordinate u sqrt(1 - 1/s)), loss (relative to uniform), curvature
    and noise along the path, transverse_curvature and transverse_noise (per direction).
    """
    s, beta = int(stride), float(gain)
    drops = _path_drops(drops)
    blocks = max(1, samples // block)
    m = len(drops)
    mean_loss, hess = np.zeros(m), np.zeros((m, s, s))
    g1, g2 = np.zeros((m, s)), np.zeros((m, s, s))
    for b in range(blocks):
        gram, target = problem_sample(s, chunks, dim, block, seed * 100003 + b)
        for i, u in enumerate(drops):
            a = jnp.zeros(s, jnp.float64).at[0].set(-u)
            value, h, grads = loss_derivatives(a, gram, target, beta, loss)
            grads = np.asarray(grads)
            mean_loss[i] += float(value) / blocks
            hess[i] += np.asarray(h) / blocks
            g1[i] += grads.mean(0) / blocks
            g2[i] += grads.T @ grads / (block * blocks)
    return _path_dict(drops, mean_loss, hess, g2 - g1[:, :, None] * g1[:, None, :])


def _path_drops(drops):
    """The drops u of the escape path: default -0.2 .. 1.5 in steps of 0.1."""
    return np.arange(-2, 16) * 0.1 if drops is None else np.asarray(drops, float)


def _path_dict(drops, loss, hess, cov):
    """escape_path's dict from the loss (m,), its Hessians (m, s, s) and the per-problem
    gradient covariances (m, s, s) at the drops (m,): projected on the drop direction e of
    phase 0 and on the s - 2 zero-sum directions across it."""
    s = hess.shape[-1]
    centring = np.eye(s) - 1.0 / s
    e = centring[0] / np.linalg.norm(centring[0])
    across = centring - np.outer(e, e)
    return {
        "drop": drops,
        "x": drops * math.sqrt(1.0 - 1.0 / s),
        "loss": loss - np.interp(0.0, drops, loss),
        "curvature": np.einsum("i,nij,j->n", e, hess, e),
        "noise": np.einsum("i,nij,j->n", e, cov, e),
        "transverse_curvature": np.einsum("ij,nji->n", across, hess) / max(s - 2, 1),
        "transverse_noise": np.einsum("ij,nji->n", across, cov) / max(s - 2, 1),
    }


@functools.partial(jit, static_argnums=0)
def _interpolated_hessians(stride, drops, coefficients):
    def at(u):
        a = jnp.zeros(stride).at[0].set(-u)
        return interpolated_finite_d_loss(a, coefficients), jax.hessian(interpolated_finite_d_loss)(
            a, coefficients
        )

    return jax.vmap(at)(drops)


def escape_path_finite_d(stride, chunks, dim, gain, drops=None, samples=2**14, seed=0, block=2**14):
    """escape_path with the loss and curvatures of the exact expected loss L_d (mse).

    Same path and dict as escape_path; the loss, curvature and transverse_curvature come
    from L_d (theory.finite_d, through theory.support's interpolant of its per-phase loss:
    no sampling error), the gradient noise from `samples` Monte Carlo problems (gradients
    only: no Hessian per problem).
    """
    s, beta = int(stride), float(gain)
    drops = _path_drops(drops)
    coefficients = jnp.asarray(per_phase_loss_coefficients(float(chunks), beta, float(dim)))
    loss, hess = (
        np.asarray(x) for x in _interpolated_hessians(s, jnp.asarray(drops), coefficients)
    )
    blocks = max(1, samples // block)
    m = len(drops)
    g1, g2 = np.zeros((m, s)), np.zeros((m, s, s))
    for b in range(blocks):
        gram, target = problem_sample(s, chunks, dim, block, seed * 100003 + b)
        for i, u in enumerate(drops):
            a = jnp.zeros(s, jnp.float64).at[0].set(-u)
            grads = np.asarray(problem_gradients(a, gram, target, beta, "mse"))
            g1[i] += grads.mean(0) / blocks
            g2[i] += grads.T @ grads / (block * blocks)
    return _path_dict(drops, loss, hess, g2 - g1[:, :, None] * g1[:, None, :])


def escape_passage(path, stride, lr, batch, grid=4000):
    """The 1-D passage along one drop-one-phase line (module docstring, steps 1-3).

    path: escape_path's or escape_path_finite_d's dict; stride s; SGD lr eta and batch B
    (time t = eta n). The loss maximum past u = 0 is the saddle; the passage runs from the
    lowest drop where the transverse curvature is still positive (reflecting) to the path's
    end (absorbing), on `grid` points. Returns a dict: x, drift, diffusion (grid,) of the
    matched diffusion, barrier, temperature (eta c / 2B at the well), saddle_drop, and the
    harmonic data of Kramers-Langer (well_curvature, saddle_curvatures); None where the loss
    does not fall past a maximum.
    """
    from scipy.interpolate import CubicSpline

    s = int(stride)
    drop, x, loss = path["drop"], path["x"], path["loss"]
    well = int(np.argmin(np.abs(drop)))
    top = well + int(np.argmax(loss[well:]))
    if top == well or top == len(x) - 1 or loss[-1] >= loss[top]:
        return None
    stable = path["transverse_curvature"] > 0
    start = well - int(np.argmin(stable[well::-1])) + 1 if not stable[: well + 1].all() else 0
    fine = np.linspace(x[start], x[-1], grid)

    def spline(key):
        return CubicSpline(x[start:], path[key][start:])

    mu = spline("transverse_curvature")
    mu_x = mu(fine)
    if np.any(lr * mu_x >= 2.0):
        raise ValueError("escape_rate: lr * transverse curvature >= 2: the recursion is unstable")
    t_along = lr * spline("noise")(fine) / (2.0 * batch)
    # stationary variance of one transverse mode of the discrete recursion at fixed x
    var_across = lr * spline("transverse_noise")(fine) / (batch * mu_x * (2.0 - lr * mu_x))
    drift = -spline("loss")(fine, 1) - 0.5 * (s - 2) * mu(fine, 1) * var_across
    modified, diffusion = _modified_diffusion(fine, drift, np.gradient(drift, fine), t_along, lr)
    return {
        "x": fine,
        "drift": modified,
        "diffusion": diffusion,
        "barrier": float(loss[top] - loss[well]),
        "temperature": float(lr * path["noise"][well] / (2.0 * batch)),
        "saddle_drop": float(drop[top]),
        "well_curvature": float(path["curvature"][well]),
        "saddle_curvatures": [path["curvature"][top]]
        + [path["transverse_curvature"][top]] * (s - 2),
    }


def escape_rate(path, stride, lr, batch, grid=4000):
    """Rate of escape of SGD from uniform pooling over the s drop-one-phase saddles (module docstring).

    Arguments as escape_passage. R = s / tau with tau the mean first-passage time of the
    passage (first_passage_time): the rate of the exponential law the survival approaches
    once the barrier is several temperatures (escape_within uses the survival itself).
    Returns a dict: rate (per unit t, all s saddles), kramers_rate (harmonic Kramers-Langer
    at the well's temperature, s saddles, no step-size or transverse corrections), barrier,
    temperature, saddle_drop; rate 0 and barrier inf where the loss does not fall past a
    maximum.
    """
    s = int(stride)
    passage = escape_passage(path, s, lr, batch, grid)
    if passage is None:
        temperature = lr * path["noise"][int(np.argmin(np.abs(path["drop"])))] / (2.0 * batch)
        return {"rate": 0.0, "kramers_rate": 0.0, "barrier": math.inf,
                "temperature": float(temperature), "saddle_drop": math.nan}  # fmt: skip
    tau = first_passage_time(passage["x"], passage["drift"], passage["diffusion"])
    kramers = s * kramers_rate(
        passage["barrier"],
        passage["temperature"],
        [passage["well_curvature"]] * (s - 1),
        passage["saddle_curvatures"],
    )
    return {
        "rate": s / tau,
        "kramers_rate": kramers,
        "barrier": passage["barrier"],
        "temperature": passage["temperature"],
        "saddle_drop": passage["saddle_drop"],
    }


def passage_survival(passage, time, start=0.0, cells=400):
    """S(t): probability that the passage has not reached its absorbing end by time t.

    passage: escape_passage's dict; time t (scalar or (T,)); start: the starting x (0: uniform
    pooling). The Fokker-Planck equation of the passage's diffusion on `cells` finite volumes
    (central fluxes, no flux through the reflecting end, the last cell a sink), solved by
    the matrix exponential. Returns a float or (T,).
    """
    from scipy.linalg import expm

    x = np.linspace(passage["x"][0], passage["x"][-1], cells)
    drift = np.interp(x, passage["x"], passage["drift"])
    diffusion = np.interp(x, passage["x"], passage["diffusion"])
    h = x[1] - x[0]
    mid = 0.5 * (drift[:-1] + drift[1:])
    # flux between cells i and i + 1: mid (p_i + p_{i+1}) / 2 - (D_{i+1} p_{i+1} - D_i p_i) / h
    left = mid / 2.0 + diffusion[:-1] / h
    right = mid / 2.0 - diffusion[1:] / h
    generator = np.zeros((cells, cells))
    i = np.arange(cells - 1)
    generator[i, i] -= left / h
    generator[i, i + 1] -= right / h
    generator[i + 1, i] += left / h
    generator[i + 1, i + 1] += right / h
    generator[-1, :] = 0.0  # the absorbing end: what enters the last cell leaves
    generator[:, -1] = 0.0
    p0 = np.zeros(cells)
    p0[int(np.argmin(np.abs(x - start)))] = 1.0
    times = np.atleast_1d(np.asarray(time, float))
    out = np.array([np.sum((expm(generator * t) @ p0)[:-1]) for t in times])
    return float(out[0]) if np.ndim(time) == 0 else out


def _modified_diffusion(x, drift, slope, temperature, lr):
    """Drift and diffusion of the SDE whose time-lr map is the chain x <- x + lr f + noise.

    Locally the chain is the linear recursion of slope f'; matching its one-step mean and
    variance exactly (z = lr f', clipped at -0.9): drift f log(1 + z) / z, diffusion
    T log(1 + z) / (z (1 + z/2)); to O(lr) these are f - (lr/2) f f' and T (1 - lr f'), the
    weak second-order modified equation, whose O(lr) terms in f'' and T' are added:
    -(lr/2) T f'' to the drift, -(lr/2) f T' to the diffusion. x, drift, slope, temperature:
    (n,) on the grid. Returns (drift (n,), diffusion (n,)).
    """
    # z <= -1 (lr times the curvature >= 1, only far on the well's back wall) has no matching
    # diffusion: there the chain overshoots, and the match at z = -0.9 stands in for it
    z = np.maximum(lr * slope, -0.9)
    small = np.abs(z) < 1e-6
    safe = np.where(small, 1.0, z)
    ratio = np.where(small, 1.0 - z / 2.0, np.log1p(safe) / safe)
    drift_out = drift * ratio - 0.5 * lr * temperature * np.gradient(slope, x)
    diffusion = temperature * ratio / (1.0 + z / 2.0)
    diffusion = diffusion - 0.5 * lr * drift * np.gradient(temperature, x)
    return drift_out, diffusion


def escape_probability(rate, time):
    """P(a run has left the uniform well by time t) = 1 - exp(-rate t) (Poisson escapes)."""
    return 1.0 - math.exp(-rate * time)


def delta_max_with_escape(
    floor, stride, p_escape, escaped_delta_max, seeds=1, level=0.95, draws=DRAWS, seed=0
):
    """delta_max when each run has left the uniform well with probability p_escape.

    floor: noise_floor's dict (its pooling_sd and eval_sd); stride s;
    escaped_delta_max: delta_max of the state an escaped run reaches (the (s-1)-phase
    state, theory.phase_accuracy_profile); seeds: runs averaged, each escaping
    independently (the held-out error is shared, as in delta_max_distribution).
    Returns a dict: delta_max_mean (expected, one run) = p escaped + (1 - p) floor mean,
    and mean_of_seeds_interval, the central `level` interval of the seed mean (a mixture:
    binomial number of escapes). Monte Carlo over `draws` from `seed`.
    """
    rng = np.random.default_rng(seed)
    s = int(stride)
    pooling = floor["pooling_sd"] * rng.standard_normal((draws, seeds, s))
    held_out = floor["eval_sd"] * rng.standard_normal((draws, 1, s))
    ranges = np.ptp(pooling + held_out, axis=-1)
    escaped = rng.random((draws, seeds)) < p_escape
    runs = np.where(escaped, escaped_delta_max, ranges)
    tails = [(1.0 - level) / 2.0, (1.0 + level) / 2.0]
    return {
        "delta_max_mean": float(
            p_escape * escaped_delta_max + (1 - p_escape) * ranges[:, 0].mean()
        ),
        "mean_of_seeds_interval": tuple(float(q) for q in np.quantile(runs.mean(1), tails)),
    }


@functools.partial(jit, static_argnums=(5, 6))
def _discrete_escapes(
    key, coefficients, drops, noise, transverse_noise, steps, chains, lr, batch, init, level
):
    s = init.shape[0]
    grad = jax.grad(interpolated_finite_d_loss)
    centring = jnp.eye(s) - 1.0 / s

    def step(i, state):
        a, k = state
        j = jnp.argmin(a)
        u = jnp.clip((jnp.sum(a) - a[j]) / (s - 1) - a[j], drops[0], drops[-1])
        e = centring[j] / jnp.linalg.norm(centring[j])
        along = jnp.interp(u, drops, noise)
        across = jnp.interp(u, drops, transverse_noise)
        z = jax.random.normal(jax.random.fold_in(k, i), (s,))
        # noise with covariance (along e e^T + across (P - e e^T)) / B
        xi = jnp.sqrt(along) * jnp.dot(e, z) * e + jnp.sqrt(across) * (
            centring @ z - jnp.dot(e, z) * e
        )
        return a - lr * (grad(a, coefficients) + xi / jnp.sqrt(batch)), k

    def chain(k):
        a0 = init * jax.random.normal(jax.random.fold_in(k, steps), (s,))
        a, _ = jax.lax.fori_loop(0, steps, step, (a0, k))
        return jnp.min(jax.nn.softmax(a)) <= level

    return jnp.mean(jax.vmap(chain)(jax.random.split(key, chains)))


def escape_fraction_discrete(
    path, stride, chunks, dim, gain, lr, batch, steps, init_scale=0.01, chains=256, seed=0
):
    """Fraction of runs that leave the uniform well in `steps` SGD steps, by simulating the
    reduced recursion a <- a - lr (grad L_d(a) + xi), xi Gaussian with the path's noise.

    L_d is the interpolated finite-d loss (theory.support); the noise covariance is
    (c(u) e e^T + c_perp(u) (P - e e^T)) / B with e the drop direction of the most-dropped
    phase, u its drop and c, c_perp read off `path` (escape_path_finite_d). Unlike
    escape_rate it keeps all s - 1 zero-sum modes (no 1-D reduction) and SGD's discrete
    steps: a simulation of the recursion escape_rate reduces, for consistency checks.
    Escaped: min alpha at the end at or below escaped_weight (the weight of the phase
    dropped to the path's end, where the passage ends).
    Returns a float.
    """
    coefficients = jnp.asarray(per_phase_loss_coefficients(float(chunks), float(gain), float(dim)))
    return float(
        _discrete_escapes(
            jax.random.PRNGKey(seed),
            coefficients,
            jnp.asarray(path["drop"]),
            jnp.asarray(path["noise"]),
            jnp.asarray(path["transverse_noise"]),
            int(steps),
            int(chains),
            float(lr),
            float(batch),
            jnp.full(int(stride), float(init_scale)),
            escaped_weight(stride, np.max(path["drop"])),
        )
    )


def escaped_weight(stride, drop=None):
    """e^-u / (e^-u + s - 1): the weight of a phase dropped by u, by default to the end of
    the default path (its largest drop). The passage ends there; a run counts as escaped once
    its smallest pooling weight is at or below it."""
    u = float(np.max(_path_drops(None))) if drop is None else float(drop)
    return math.exp(-u) / (math.exp(-u) + int(stride) - 1)


def escape_within(stride, chunks, gain, dim, lr, batch, steps, samples=2**14, seed=0):
    """P(an SGD run has left uniform pooling within `steps` steps) at finite d (module docstring).

    stride s, chunks N, gain beta, dim d, lr eta, batch B, steps n (one head, mse, fixed gain).
    1 where uniform pooling is linearly unstable at d (theory.growth_rate_finite_d > 0);
    else 1 - S(eta n)^s with S the survival of the passage on the L_d path from uniform
    pooling (escape_passage, passage_survival; the path's noise from `samples` problems
    drawn from `seed`), the s saddles competing independently: 0 where no lower state lies
    past a saddle. Escaped means the smallest pooling weight reached escaped_weight.
    Returns a float.
    """
    if growth_rate_finite_d(stride, chunks, gain, dim) > 0.0:
        return 1.0
    path = escape_path_finite_d(stride, chunks, dim, gain, samples=samples, seed=seed)
    passage = escape_passage(path, stride, lr, batch)
    if passage is None:
        return 0.0
    return 1.0 - passage_survival(passage, lr * steps) ** int(stride)


def escape_boundary(stride, gain, dim, lr, batch, steps, samples=2**12, seed=0, low=3):
    """N_esc(d, lr, B, T): the context length past which SGD leaves uniform pooling within
    `steps` steps with probability 1/2 (escape_within; module docstring).

    stride s, gain beta, dim d, lr eta, batch B, steps n; samples, seed: the path noise's
    Monte Carlo problems; low: smallest N searched. Bisection over integer N in
    [low, ceil(N_c(d))] (N_c(d) = theory.critical_chunks_finite_d: linearly unstable past
    it, escape_within 1), assuming escape_within rises with N; the crossing is placed
    between the bracketing integers by the log-odds of their probabilities.
    Returns a dict: chunks (N_esc, a float), bracket (N - 1, N), probabilities (their two
    P), critical_chunks_finite_d.
    """
    critical = critical_chunks_finite_d(gain, stride, dim)
    top = int(math.ceil(critical)) if math.isfinite(critical) else 100_000

    def p_at(n):
        return escape_within(stride, n, gain, dim, lr, batch, steps, samples, seed)

    lo, hi = int(low), top
    p_lo, p_hi = p_at(lo), 1.0
    if p_lo >= 0.5:
        return {"chunks": float(lo), "bracket": (lo, lo), "probabilities": (p_lo, p_lo),
                "critical_chunks_finite_d": critical}  # fmt: skip
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p_mid = p_at(mid)
        lo, p_lo, hi, p_hi = (mid, p_mid, hi, p_hi) if p_mid < 0.5 else (lo, p_lo, mid, p_mid)

    def log_odds(p):
        p = min(max(p, 1e-12), 1.0 - 1e-12)
        return math.log(p / (1.0 - p))

    span = log_odds(p_hi) - log_odds(p_lo)
    fraction = -log_odds(p_lo) / span if span > 0 else 1.0
    return {
        "chunks": lo + fraction,
        "bracket": (lo, hi),
        "probabilities": (p_lo, p_hi),
        "critical_chunks_finite_d": critical,
    }


def escape_boundary_curve(stride, gains, dim, lr, batch, steps, samples=2**12, seed=0):
    """N_esc over gains at one stride (escape_boundary at each gain), for the phase diagram.

    Returns a dict of lists: gain, ratio (gain / stride), chunks (N_esc),
    critical_chunks_finite_d (N_c(d)).
    """
    rows = [
        escape_boundary(stride, g, dim, lr, batch, steps, samples=samples, seed=seed) for g in gains
    ]
    return {
        "gain": [float(g) for g in gains],
        "ratio": [float(g) / stride for g in gains],
        "chunks": [r["chunks"] for r in rows],
        "critical_chunks_finite_d": [r["critical_chunks_finite_d"] for r in rows],
    }


float64_module(__name__)  # 64-bit types inside these functions only
