"""Which supports the reduced flow can end on, and which it does from near-uniform starts.

Derivation (docs/theory.md §6.4; one head, mse, c = N/(N-1), l(m) = (1 - sigma_N(m))^2,
w(m) = -l'(m) = 2 sigma (1 - sigma)^2). With G_j = dL/dalpha_j = (c/s) beta l'(beta alpha_j),
the logit flow is da_j/dt = -alpha_j (G_j - sum_i alpha_i G_i). At the k-phase state
(alpha = 1/k on a support S, 0 elsewhere):

* internal modes (zero-sum perturbations inside S) move at rate
  -(c beta^2 / (s k^2)) l''(beta/k): stable iff beta/k >= log((N-1)/2) (or k = 1);
* a dropped phase j obeys d log alpha_j/dt = kappa alpha_j with
  kappa = (1 + 1/k) (c beta / s) (w(0) - w(beta/k)) (its own logit moves at
  alpha_j (c beta/s)(w(0) - w(beta/k)); the support's logits move back by 1/k of that,
  through alpha_i = 1/k and sum_i alpha_i = 1 - alpha_j): its weight decays only algebraically,
  alpha_j ~ 1/(|kappa| t), when kappa < 0, and re-enters when kappa > 0, at the blow-up
  time 1/(kappa alpha_j) of dalpha_j/dt = kappa alpha_j^2 -- exponentially long in the
  logit gap, because the flow carries the factor alpha_j.

w is hump-shaped with its peak at sigma = 1/3 (the instability threshold), so the
k-state is stable iff log((N-1)/2) <= beta/k <= m_reentry(N), where
sigma_N(m_reentry) is the root above 1/3 of x (1 - x)^2 = w(0)/2.
Which admissible k is reached from near-uniform starts depends on the start's
direction only (the linear phase scales it, docs/theory.md §6.2): predicted_support_size
samples that map over isotropic directions with a fixed-step integrator of its own.

Finite d (dim=d). The same map under the expected finite-d loss L_d (theory.finite_d) in
place of L_inf. L_d is a mean over phases of one function of two numbers,
f(alpha_phi, o_phi) with o_phi = |alpha|^2 - alpha_phi^2 (theory.finite_d: the needle sees
alpha_phi and o_phi, the distractors |alpha|^2), the same for every stride. Evaluating its
quadrature at every RK4 stage is costly, so the flow uses f's Chebyshev
interpolant on [0, 1]^2 (degrees SURROGATE_DEGREES, built once per (N, beta, d) from the
quadrature at the Chebyshev points): permutation symmetric like L_d, so uniform pooling
stays a fixed point, and close to L_d in value and gradient (tests/theory/test_support_finite_d.py). With
g_phi = dL/dalpha_phi = (f_x(alpha_phi, o_phi) + 2 alpha_phi sum_{q != phi} f_o(alpha_q, o_q)) / s
the logit flow is da/dt = -alpha (g - alpha . g), as at d = inf. The admissible sizes at d
follow the same two tests as above, on f: the zero-sum curvature inside the support of the
k-state, and the sign of alpha . g - g_j for a dropped phase j (re-entry iff positive).
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from weakspots.idealized.precision import float64_module
from weakspots.idealized.xla import jit

from .accuracy import delta_max, phase_accuracy_profile, psc
from .finite_d import CHI_NODES, expected_loss_given_norm
from .needle_mass import mse_curvature, mse_drive, sigma_n
from .quadrature import chi_nodes_traced
from .reduced import reduced_loss
from .thresholds import growth_rate


def internal_rate(stride, chunks, gain, support_size):
    """Growth rate of zero-sum perturbations inside a k-phase support (module docstring).

    stride s, chunks N, gain beta, support_size k (scalars/arrays). Returns an array;
    positive means the k-state is internally unstable (0 for k = 1: no internal mode).
    """
    k = np.asarray(support_size, float)
    c = chunks / (chunks - 1.0)
    rate = -(c * gain**2 / (stride * k**2)) * mse_curvature(gain / k, chunks)
    return np.where(k > 1, rate, 0.0)


def reentry_rate(stride, chunks, gain, support_size):
    """kappa = (1 + 1/k)(c beta/s)(w(0) - w(beta/k)): d log alpha_j/dt = kappa alpha_j, dropped phase.

    Arguments as internal_rate (k < s). Returns an array; positive: dropped phases re-enter.
    """
    k = np.asarray(support_size, float)
    c = chunks / (chunks - 1.0)
    return (
        (1.0 + 1.0 / k) * c * gain / stride * (mse_drive(0.0, chunks) - mse_drive(gain / k, chunks))
    )


def reentry_time(stride, chunks, gain, support_size, dropped_weight):
    """Time for a dropped phase of weight alpha_j to re-enter: 1/(kappa alpha_j) (inf if kappa <= 0).

    stride s, chunks N, gain beta, support_size k, dropped_weight alpha_j (arrays
    broadcast). Leading order in alpha_j (module docstring). Returns an array.
    """
    kappa = reentry_rate(stride, chunks, gain, support_size)
    with np.errstate(divide="ignore"):
        return np.where(kappa > 0, 1.0 / (kappa * np.asarray(dropped_weight, float)), np.inf)


def reentry_margin(chunks):
    """m_reentry(N): dropped phases re-enter iff beta/k > m_reentry (module docstring)."""
    target = mse_drive(0.0, chunks) / 2.0
    lo, hi = 1.0 / 3.0, 1.0
    for _ in range(200):  # x (1 - x)^2 decreases on (1/3, 1)
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mid * (1 - mid) ** 2 > target else (lo, mid)
    x = 0.5 * (lo + hi)
    return math.log(x * (chunks - 1.0) / (1.0 - x))


def stable_support_sizes(stride, chunks, gain, dim=None):
    """Admissible support sizes k: internally stable and stable against re-entry (docs/theory.md §6.4).

    stride s, chunks N, gain beta (one head, mse); dim: None (or inf) for L_inf, else d:
    the same tests on L_d (finite_d_support_rates). Returns a sorted int array.
    """
    ks = np.arange(1, stride + 1)
    if dim is not None and not math.isinf(dim):
        rates = [finite_d_support_rates(stride, chunks, gain, dim, k) for k in ks[:-1]]
        stable = [i <= 0.0 and r <= 0.0 for i, r in rates]
        uniform = interpolated_growth_rate(stride, chunks, gain, dim) <= 0.0
        return ks[np.array(stable + [uniform])]
    internal = internal_rate(stride, chunks, gain, ks) <= 0.0
    external = np.array([k == stride or reentry_rate(stride, chunks, gain, k) <= 0 for k in ks])
    return ks[internal & external]


def support_loss(stride, chunks, gain, support_size):
    """L_inf at the k-phase state: c [(k/s) l(beta/k) + ((s-k)/s) l(0)] (docs/theory.md §5, §6.4)."""
    k = np.asarray(support_size, float)
    c = chunks / (chunks - 1.0)
    dropped = (1.0 - 1.0 / chunks) ** 2
    return c * (
        k / stride * (1.0 - sigma_n(gain / k, chunks)) ** 2 + (stride - k) / stride * dropped
    )


@functools.partial(jit, static_argnames=("steps", "loss"))
def _settle(logits, gain, chunks, dt, steps, loss):
    def field(a):
        return -jax.grad(reduced_loss)(a, gain, chunks, loss)

    def step(a, _):
        k1 = field(a)
        k2 = field(a + 0.5 * dt * k1)
        k3 = field(a + 0.5 * dt * k2)
        k4 = field(a + dt * k3)
        return a + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4), None

    final, _ = jax.lax.scan(step, logits, None, length=steps)
    return jax.nn.softmax(final, axis=-1)


def covered(pooling_weights, stride):
    """Phases a head covers: weight above 1/(2s). pooling_weights (..., s) -> bool (..., s)."""
    return np.asarray(pooling_weights) > 0.5 / stride


def isotropic_starts(stride, samples, seed=0, amplitude=1e-3, heads=1):
    """Pooling logits amplitude * z / |z|, z standard normal (samples, H, s), from seed."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((samples, heads, stride))
    return amplitude * z / np.linalg.norm(z, axis=(-2, -1), keepdims=True)


def sampled_final_weights(
    stride,
    chunks,
    gain,
    heads=1,
    loss="mse",
    samples=256,
    seed=0,
    amplitude=1e-3,
    settle=None,
    dim=None,
):
    """Final pooling weights from `samples` isotropic near-uniform starts (semi-analytic).

    Starts amplitude * z / |z| (z standard normal, (H, s)), integrated by fixed-step RK4
    for t*(amplitude) = log(1/amplitude)/lambda + settle: under L_inf (dim None or inf;
    dt = 0.5, settle 4000 by default), or under L_d (dim = d; one head, mse; the
    interpolated L_d of the module docstring, dt = FINITE_D_STEP, settle FINITE_D_SETTLE
    by default, lambda = interpolated_growth_rate). Returns (samples, H, s).
    """
    finite = dim is not None and not math.isinf(dim)
    if finite and (heads != 1 or loss != "mse"):
        raise ValueError("sampled_final_weights: finite dim is for one head and mse")
    if finite:
        lam = interpolated_growth_rate(stride, chunks, gain, dim)
    else:
        lam = float(growth_rate(stride, chunks, gain, heads, loss))
    if not lam > 0:
        return np.full((samples, heads, stride), 1.0 / stride)
    z = isotropic_starts(stride, samples, seed, amplitude, heads)
    if settle is None:
        settle = FINITE_D_SETTLE if finite else 4000.0
    t_end = math.log(1.0 / amplitude) / lam + settle
    if finite:
        coefficients = jnp.asarray(per_phase_loss_coefficients(chunks, gain, dim))
        steps = math.ceil(t_end / FINITE_D_STEP)
        weights, _, _ = _settle_finite_d(
            jnp.asarray(z[:, 0]),
            coefficients,
            FINITE_D_STEP,
            steps,
            math.ceil(FINITE_D_BLOCK / FINITE_D_STEP),
            steps + math.ceil(FINITE_D_MAX_SETTLE / FINITE_D_STEP),
        )
        return np.asarray(weights)[:, None]
    dt = 0.5
    gains = jnp.full((heads,), float(gain))
    run = jax.vmap(lambda a: _settle(a, gains, float(chunks), dt, int(t_end / dt), loss))
    return np.asarray(run(jnp.asarray(z)))


def predicted_support_size(stride, chunks, gain, samples=256, seed=0, dim=None):
    """Distribution of the support size k reached from near-uniform starts (docs/theory.md §6.4).

    stride s, chunks N, gain beta (one head, mse); dim: None for the d = inf flow of
    L_inf, or d for the flow of the finite-d loss L_d (module docstring). Semi-analytic:
    the outcome depends only on the start's direction, sampled isotropically
    (sampled_final_weights). Returns (sizes (K,), probabilities (K,), admissible sizes);
    a unique prediction is a single size with probability 1.
    """
    weights = sampled_final_weights(stride, chunks, gain, 1, "mse", samples, seed, dim=dim)
    sizes = covered(weights[:, 0], stride).sum(axis=-1)
    values, counts = np.unique(sizes, return_counts=True)
    return values, counts / counts.sum(), stable_support_sizes(stride, chunks, gain, dim)


def support_profile(stride, chunks, gain, dim, samples=256, seed=0):
    """Predicted per-phase accuracy, delta_max and psc of the k-state reached (docs/theory.md §7).

    Uses the most probable k of predicted_support_size and theory.accuracy at dim d
    (inf allowed). Returns (accuracy (s,), delta_max, psc); phases sorted covered first.
    """

    sizes, probs, _ = predicted_support_size(stride, chunks, gain, samples, seed)
    k = int(sizes[np.argmax(probs)])
    accuracy = phase_accuracy_profile(stride, chunks, k, dim)
    return accuracy, float(delta_max(accuracy)), float(psc(accuracy))


# --- Finite d: the flow of L_d through its per-phase interpolant (module docstring) ---------

SURROGATE_DEGREES = (64, 24)  # Chebyshev terms in alpha_phi and in o_phi; tests measure the error
FINITE_D_STEP = 4.0  # RK4 step of the finite-d flow (tests compare it with diffrax's flow)
FINITE_D_SETTLE = 400.0  # time past t*(amplitude) before the flow may stop once decided
FINITE_D_BLOCK = 400.0  # the covered set must hold this long, every phase clear of the band
FINITE_D_MAX_SETTLE = 20000.0  # hard stop past t*(amplitude)


def _chebyshev_points(n):
    return 0.5 - 0.5 * np.cos(np.pi * (np.arange(n) + 0.5) / n)  # on [0, 1]


@jit
def _per_phase_loss_rows(needle_weight, others2, chunks, gain, dim):
    rho, log_w = chi_nodes_traced(dim, CHI_NODES)

    def row(x):  # one alpha_phi against every o_phi: (O,)
        x = jnp.broadcast_to(x, others2.shape)[:, None]
        per = expected_loss_given_norm(
            x, x**2 + others2[:, None], gain, chunks, dim, rho[None, :] ** 2 / dim, 1.0
        )
        return per @ jnp.exp(log_w)

    return jax.lax.map(row, needle_weight)


def per_phase_loss(needle_weight, others2, chunks, gain, dim):
    """f(alpha_phi, o_phi): E[l] at one phase, the mean over phases of which is L_d (finite_d).

    needle_weight alpha_phi (X,), others2 o_phi = |alpha|^2 - alpha_phi^2 (O,); chunks N,
    gain beta, dim d. The quadrature of theory.finite_d.finite_d_loss (same rules).
    Returns (X, O) on the grid.
    """
    f = jnp.asarray
    return np.asarray(
        _per_phase_loss_rows(f(needle_weight, jnp.float64), f(others2, jnp.float64),
                             f(float(chunks)), f(float(gain)), f(float(dim)))
    )  # fmt: skip


@functools.lru_cache(maxsize=32)
def per_phase_loss_coefficients(chunks, gain, dim, degrees=SURROGATE_DEGREES):
    """Chebyshev coefficients (degrees) of f(x, o) on [0, 1]^2 (module docstring), in t = 2x - 1.

    Interpolates per_phase_loss at the degrees[0] x degrees[1] Chebyshev points. Cached per
    (N, beta, d): the stride does not enter f. Returns a read-only (nx, no) array.
    """
    x, o = _chebyshev_points(degrees[0]), _chebyshev_points(degrees[1])
    values = per_phase_loss(x, o, chunks, gain, dim)
    vx, vo = (
        np.polynomial.chebyshev.chebvander(2 * t - 1, n - 1)
        for t, n in ((x, degrees[0]), (o, degrees[1]))
    )
    coefficients = np.linalg.solve(vx, np.linalg.solve(vo, values.T).T)
    coefficients.flags.writeable = False
    return coefficients


def _chebyshev_basis(t, n):
    """T_0..T_{n-1} at t (...,) by the three-term recurrence (stable on [-1, 1]): (..., n)."""

    def step(pair, _):
        previous, current = pair
        following = 2.0 * t * current - previous
        return (current, following), following

    first = jnp.ones_like(t)
    _, rest = jax.lax.scan(step, (first, t), None, length=n - 2)
    return jnp.moveaxis(jnp.concatenate([first[None], t[None], rest]), 0, -1)


def _surrogate_terms(weights, coefficients):
    """f, f_x, f_o of the interpolant at each phase's (alpha_phi, o_phi): three (s,) arrays."""
    nx, no = coefficients.shape
    others2 = jnp.sum(weights**2) - weights**2
    bx = _chebyshev_basis(2.0 * weights - 1.0, nx)
    bo = _chebyshev_basis(2.0 * others2 - 1.0, no)
    # d/dx T_k(2x - 1) = 2 T_k': the derivative's Chebyshev coefficients (chebder), as matrices
    dx = jnp.asarray(2.0 * np.polynomial.chebyshev.chebder(np.eye(nx)))  # (nx - 1, nx)
    do = jnp.asarray(2.0 * np.polynomial.chebyshev.chebder(np.eye(no)))  # (no - 1, no)
    along_o = bx @ coefficients  # (s, no)
    value = jnp.sum(along_o * bo, axis=-1)
    by_x = jnp.sum(((bx[:, : nx - 1] @ dx) @ coefficients) * bo, axis=-1)
    by_o = jnp.sum(along_o * (bo[:, : no - 1] @ do), axis=-1)
    return value, by_x, by_o


def interpolated_finite_d_loss(pooling_logits, coefficients):
    """L_d(a) through f's interpolant: mean_phi f(alpha_phi, o_phi) (module docstring).

    pooling_logits (s,); coefficients: per_phase_loss_coefficients. Returns a scalar.
    """
    value, _, _ = _surrogate_terms(jax.nn.softmax(pooling_logits), coefficients)
    return jnp.mean(value)


def _weight_gradient(weights, coefficients):
    """g = dL_d/dalpha at weights (s,) through the interpolant (module docstring)."""
    _, by_x, by_o = _surrogate_terms(weights, coefficients)
    return (by_x + 2.0 * weights * (jnp.sum(by_o) - by_o)) / weights.shape[0]


def _finite_d_field(logits, coefficients):
    weights = jax.nn.softmax(logits)
    g = _weight_gradient(weights, coefficients)
    return -weights * (g - jnp.dot(weights, g))


def _decided(weights):
    """Every phase clearly covered or clearly dropped: none in (1/(4s), 1/s). (B, s) -> bool."""
    s = weights.shape[-1]
    return jnp.all((weights <= 0.25 / s) | (weights >= 1.0 / s))


@jit
def _settle_finite_d(logits, coefficients, dt, steps, block, max_steps):
    """RK4 for at least `steps`, then in blocks of `block` steps until every start is decided
    (_decided) with its covered set unchanged over the last block, or max_steps."""

    def step(_, a):
        k1 = _finite_d_field(a, coefficients)
        k2 = _finite_d_field(a + 0.5 * dt * k1, coefficients)
        k3 = _finite_d_field(a + 0.5 * dt * k2, coefficients)
        k4 = _finite_d_field(a + dt * k3, coefficients)
        return a + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)

    def advance(a, n):
        return jax.vmap(lambda x: jax.lax.fori_loop(0, n, step, x))(a)

    def covered_set(a):
        return jax.nn.softmax(a, axis=-1) > 0.5 / a.shape[-1]

    def unfinished(state):
        _, done, taken = state
        return ~done & (taken < max_steps)

    def body(state):
        a, _, taken = state
        before = covered_set(a)
        a = advance(a, block)
        done = jnp.all(covered_set(a) == before) & _decided(jax.nn.softmax(a, axis=-1))
        return a, done, taken + block

    a = advance(logits, steps)
    a, done, taken = jax.lax.while_loop(unfinished, body, (a, jnp.array(False), steps))
    return jax.nn.softmax(a, axis=-1), done, taken * dt


@jit
def _support_rates(weights, direction, coefficients):
    k = jnp.sum(weights > 0)
    g, curvature = jax.jvp(lambda w: _weight_gradient(w, coefficients), (weights,), (direction,))
    # at a critical point the logit Hessian along u (zero-sum inside the support) is that of
    # alpha along u / k; direction e_0 - e_1 has |u|^2 = 2
    internal = -jnp.dot(direction, curvature) / (2.0 * k**2)
    reentry = (1.0 + 1.0 / k) * (jnp.dot(weights, g) - g[-1])
    return internal, reentry


def interpolated_growth_rate(stride, chunks, gain, dim):
    """lambda_d of uniform pooling for the interpolated L_d (theory.growth_rate_finite_d's).

    The internal rate of the s-phase state: finite_d_support_rates' curvature along
    e_0 - e_1, at alpha = 1/s (the same compiled function). Returns a float.
    """
    s = int(stride)
    coefficients = jnp.asarray(per_phase_loss_coefficients(chunks, gain, dim))
    direction = np.zeros(s)
    direction[:2] = (1.0, -1.0)
    internal, _ = _support_rates(jnp.full(s, 1.0 / s), jnp.asarray(direction), coefficients)
    return float(internal)


def finite_d_support_rates(stride, chunks, gain, dim, support_size):
    """(internal, reentry) rates of the k-phase state under L_d (module docstring, finite d).

    internal: growth rate of zero-sum moves of the support's logits (0 for k = 1);
    reentry: kappa = (1 + 1/k)(alpha . g - g_j), d log alpha_j/dt = kappa alpha_j for a dropped
    phase j to leading order (k < s; positive: re-enters). As d -> inf they become
    internal_rate and reentry_rate. Returns two floats.
    """
    k, s = int(support_size), int(stride)
    if not 1 <= k < s:
        raise ValueError(f"finite_d_support_rates: need 1 <= k < s, got k={k}, s={s}")
    coefficients = jnp.asarray(per_phase_loss_coefficients(chunks, gain, dim))
    weights = np.where(np.arange(s) < k, 1.0 / k, 0.0)
    direction = np.zeros(s)
    direction[:2] = (1.0, -1.0) if k > 1 else (0.0, 0.0)
    internal, reentry = _support_rates(jnp.asarray(weights), jnp.asarray(direction), coefficients)
    return float(internal), float(reentry)


def finite_d_support_loss(stride, chunks, gain, dim, support_size):
    """L_d at the k-phase state (alpha = 1/k on k phases, 0 elsewhere), through the interpolant.

    The finite-d counterpart of support_loss (which it approaches as d -> inf). Returns a float.
    """
    k, s = int(support_size), int(stride)
    weights = jnp.asarray(np.where(np.arange(s) < k, 1.0 / k, 0.0))
    coefficients = jnp.asarray(per_phase_loss_coefficients(chunks, gain, dim))
    return float(jnp.mean(_surrogate_terms(weights, coefficients)[0]))


float64_module(__name__)  # 64-bit types inside these functions only
