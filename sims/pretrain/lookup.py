"""The paper's lookup evaluation (docs/pretraining.md; PAPER.md §3), never trained on.

A prompt is `<doc>`, 64 records (a one-token animal key directly followed by a one-token
name value; distinct keys, distinct values), 8 demonstrations (records repeated, key then
value, not the target), then a target key: the answer is the name after that key in the
records, scored top-1 over the full vocabulary at the last position. Filler tokens (`-`)
pad the prompt so that every prompt has the same query position (the target key at the
end) and accuracy can be grouped by the target key's position modulo `modulus`:

* prefix padding: filler before the records and between the records and the
  demonstrations; the records sit side by side and move together;
* in-sequence padding: the same filler split at random among the gaps around every record,
  so the other records' phases do not move with the target's.

Target positions are the same for both paddings: in residue group `r` they are
`centre + a_r + modulus * k` with `a_r` the centred offset of `r` and integers `k` chosen so
that every group has the same mean (exactly, when `prompts_per_residue` is a multiple of
`modulus`) and, up to the lattice's granularity, the same variance (`target_moments`).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from weakspots.idealized import metrics
from weakspots.idealized.pretrain.tokenizer import Tokenizer

PADDINGS = ("prefix", "in-sequence")
RECORDS = 64
DEMONSTRATIONS = 8
MIDDLE = (24, 40)  # the target record's index is drawn from this range (the records' middle)
LOCAL_WINDOW = 16  # the compressed models' window of exact tokens
FILLER = "-"
MEAN_TOLERANCE = 1.0  # tokens
VARIANCE_TOLERANCE = 0.02  # max / min - 1 over residue groups


@dataclasses.dataclass(frozen=True)
class Prompt:
    """One lookup prompt: `tokens` `(T,)` int32 ending in the target key at `query_position`
    (= T - 1); the target key at `target_position`, its value `answer` right after it."""

    tokens: np.ndarray
    target_position: int
    residue: int
    query_position: int
    answer: int
    target_record: int
    padding: str

    def as_dict(self, tokens: bool = False) -> dict:
        out = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "tokens"
        }
        if tokens:
            out["tokens"] = self.tokens.tolist()
        return out


def _centred(residue: int, centre: int, modulus: int) -> int:
    """The offset `a` in `[-modulus/2, modulus/2)` with `centre + a = residue (mod modulus)`."""
    return (residue - centre + modulus // 2) % modulus - modulus // 2


def _integers_with_moments(n: int, total: int, squares: int) -> np.ndarray:
    """`n` integers with sum `total` and, as near as pair moves reach, sum of squares
    `squares` (whose parity must be `total`'s), sorted."""
    mean = total / n
    spread = math.sqrt(max(squares / n - mean**2, 0.0))
    quantiles = ((np.arange(n) + 0.5) / n - 0.5) * math.sqrt(12.0)
    k = np.round(mean + spread * quantiles).astype(np.int64)
    while k.sum() != total:  # one element at a time, the one that best keeps the squares
        step = 1 if k.sum() < total else -1
        k[np.argmin(np.abs(squares - (np.sum(k**2) + 2 * step * k + 1)))] += step
    while True:  # k_i += 1, k_j -= 1 keeps the sum and adds 2 (k_i - k_j + 1) to the squares
        need = squares - int(np.sum(k**2))
        values, counts = np.unique(k, return_counts=True)
        change = 2 * (values[:, None] - values[None, :] + 1)
        change[np.diag(counts < 2)] = 0  # a value moved both ways needs two elements
        a, b = np.unravel_index(np.argmin(np.abs(need - change)), change.shape)
        if abs(need - change[a, b]) >= abs(need):
            return np.sort(k)
        i = np.flatnonzero(k == values[a])[0]
        j = np.flatnonzero(k == values[b])[-1]
        k[i] += 1
        k[j] -= 1


@functools.lru_cache(maxsize=16)
def target_offsets(modulus: int, per_residue: int, spread: float) -> dict[int, np.ndarray]:
    """Per centred offset `a`, the target positions' deviations `a + modulus * k` from the
    common centre: each group's mean as near 0 as its lattice allows, and the common
    variance (within `[0.9, 1.1] * spread^2`) chosen to make the groups' variances closest."""

    def group(a: int, variance: float) -> np.ndarray:
        total = round(-a * per_residue / modulus)
        squares = per_residue * (variance / modulus**2 + (total / per_residue) ** 2)
        squares = int(round(squares))
        squares += (squares - total) % 2  # a sum of squares has the parity of the sum
        k = _integers_with_moments(per_residue, total, squares)
        return a + modulus * k

    offsets = range(-(modulus // 2), modulus - modulus // 2)
    best, best_ratio = None, math.inf
    for variance in np.linspace(0.9, 1.1, 41) * spread**2:
        groups = {a: group(a, variance) for a in offsets}
        variances = [np.var(x) for x in groups.values()]
        ratio = max(variances) / min(variances)
        if ratio < best_ratio:
            best, best_ratio = groups, ratio
    return best


@dataclasses.dataclass(frozen=True)
class Layout:
    """The design's shared geometry: the centre of the target positions, the query position."""

    centre: int
    query_position: int

    @property
    def length(self) -> int:
        return self.query_position + 1


def middle(records: int) -> tuple[int, int]:
    """The target record's index range, the records' middle: `[3R/8, 5R/8)` (24..39 of 64)."""
    if records == RECORDS:
        return MIDDLE
    return (3 * records) // 8, max((5 * records) // 8, (3 * records) // 8 + 1)


def layout(
    offsets: dict[int, np.ndarray],
    length: int | None = None,
    records: int = RECORDS,
    demonstrations: int = DEMONSTRATIONS,
) -> Layout:
    """The smallest centre and query position that fit every target position with the
    target record in `middle(records)` (or the query at `length - 1` when a longer prompt is
    asked)."""
    low = min(int(x.min()) for x in offsets.values())
    high = max(int(x.max()) for x in offsets.values())
    lo, hi = middle(records)
    centre = 1 + 2 * (hi - 1) - low  # the prefix before the target record is >= 0
    longest_prefix = centre + high - 1 - 2 * lo
    query = 1 + longest_prefix + 2 * records + 2 * demonstrations
    if length is not None:
        if length - 1 < query:
            raise ValueError(f"--length: the design needs prompts of at least {query + 1} tokens")
        query = length - 1
    return Layout(centre, query)


def design(
    padding: str,
    *,
    modulus: int = 24,
    prompts_per_residue: int = 24,
    seed: int = 0,
    length: int | None = None,
    spread: float = 48.0,
    tokenizer: Tokenizer | None = None,
    records: int = RECORDS,
    demonstrations: int = DEMONSTRATIONS,
) -> list[Prompt]:
    """The lookup prompts of one padding: `modulus * prompts_per_residue` prompts, residue
    group by residue group, all of length `length` (default: the shortest that fits).

    `spread`: the standard deviation of the target position in every group (tokens).
    `records`, `demonstrations`: the paper's 64 and 8, fewer for a shorter context (the
    target key then still sits more than `LOCAL_WINDOW` tokens before the query when
    `2 * demonstrations + 2 * (records - middle(records)[1]) >= LOCAL_WINDOW`).
    Same arguments, same prompts; the two paddings share target positions and records.
    """
    if padding not in PADDINGS:
        raise ValueError(f"--padding: expected one of {', '.join(PADDINGS)}, got {padding!r}")
    if modulus < 2:
        raise ValueError(f"--modulus: must be at least 2, got {modulus}")
    if prompts_per_residue < 2:
        raise ValueError(f"--prompts-per-residue: must be at least 2, got {prompts_per_residue}")
    if not spread > 0:
        raise ValueError(f"--spread: must be positive, got {spread}")
    most = min(Tokenizer.default().key_ids.size, Tokenizer.default().value_ids.size)
    if not 4 <= records <= most:
        raise ValueError(f"--records: must be between 4 and {most}, got {records}")
    if not 1 <= demonstrations < records:
        raise ValueError(
            f"--demonstrations: must be between 1 and --records - 1, got {demonstrations}"
        )
    tokenizer = tokenizer or Tokenizer.default()
    filler = tokenizer.ids[FILLER]
    keys, values = tokenizer.key_ids, tokenizer.value_ids
    offsets = target_offsets(modulus, prompts_per_residue, spread)
    geometry = layout(offsets, length, records, demonstrations)
    prompts = []
    for residue in range(modulus):
        deviations = offsets[_centred(residue, geometry.centre, modulus)]
        order = np.random.default_rng([seed, residue]).permutation(deviations.size)
        for deviation in deviations[order]:
            # the records from one stream, the padding's gaps from another: both paddings
            # of one seed share their targets and records
            streams = [
                np.random.default_rng([seed, modulus, len(prompts), part]) for part in (0, 1)
            ]
            target_position = geometry.centre + int(deviation)
            prompts.append(
                _prompt(
                    streams,
                    padding,
                    target_position,
                    geometry,
                    keys,
                    values,
                    filler,
                    tokenizer.doc_id,
                    residue,
                    records,
                    demonstrations,
                )
            )
    return prompts


def _prompt(
    streams, padding, target_position, geometry, keys, values, filler, doc, residue,
    records=RECORDS, demonstrations=DEMONSTRATIONS,
):  # fmt: skip
    rng, gap_rng = streams
    record_keys = rng.choice(keys, records, replace=False)
    record_values = rng.choice(values, records, replace=False)
    target = int(rng.integers(*middle(records)))
    shown = rng.choice(np.delete(np.arange(records), target), demonstrations, replace=False)
    before = target_position - 1 - 2 * target  # filler before the target key
    after = geometry.query_position - 1 - 2 * records - 2 * demonstrations - before
    gaps = np.zeros(records + 1, dtype=np.int64)  # gaps[j]: filler before record j (R: after)
    if padding == "prefix":
        gaps[0], gaps[records] = before, after
    else:
        gaps[: target + 1] = _composition(gap_rng, before, target + 1)
        gaps[target + 1 :] = _composition(gap_rng, after, records - target)
    tokens = np.full(geometry.length, filler, dtype=np.int32)
    tokens[0] = doc
    starts = 1 + np.cumsum(gaps[:records]) + 2 * np.arange(records)
    tokens[starts], tokens[starts + 1] = record_keys, record_values
    shown_at = geometry.query_position - 2 * demonstrations + 2 * np.arange(demonstrations)
    tokens[shown_at], tokens[shown_at + 1] = record_keys[shown], record_values[shown]
    tokens[geometry.query_position] = record_keys[target]
    assert (
        tokens[target_position] == record_keys[target] and starts[-1] + 2 + gaps[-1] == shown_at[0]
    )
    return Prompt(
        tokens,
        target_position,
        residue,
        geometry.query_position,
        int(record_values[target]),
        target,
        padding,
    )


def _composition(rng, total: int, parts: int) -> np.ndarray:
    """`total` filler tokens split into `parts` gaps, uniformly over all compositions."""
    cuts = np.sort(rng.choice(total + parts - 1, parts - 1, replace=False))
    edges = np.concatenate([[-1], cuts, [total + parts - 1]])
    return np.diff(edges) - 1


def design_statistics(prompts: list[Prompt], modulus: int) -> dict:
    """Per residue group: prompts, mean and variance of the target position; the query
    positions used; the largest differences between groups (tokens, relative)."""
    position = np.array([p.target_position for p in prompts], dtype=np.float64)
    residue = np.array([p.residue for p in prompts])
    groups = [position[residue == r] for r in range(modulus)]
    means = np.array([g.mean() for g in groups])
    variances = np.array([g.var() for g in groups])
    return {
        "prompts": len(prompts),
        "per_residue": [int(g.size) for g in groups],
        "query_positions": sorted({p.query_position for p in prompts}),
        "mean": means.tolist(),
        "variance": variances.tolist(),
        "mean_range": float(means.max() - means.min()),
        "variance_ratio": float(variances.max() / variances.min()),
        "local_window_clear": bool(
            all(p.query_position - p.target_position > LOCAL_WINDOW for p in prompts)
        ),
    }


def evaluate(logits_fn, prompts: list[Prompt], *, batch: int = 64) -> dict:
    """Top-1 over the full vocabulary at each prompt's last position, against its answer.

    `logits_fn(tokens (B, T) int32) -> logits (B, T, V)`, or `(B, V)`: the last position's
    alone. Returns `correct` (one bool per prompt, in order), `residue`, and
    `residue_accuracy` / `residue_counts` per residue.
    """
    correct = []
    for start in range(0, len(prompts), batch):
        chunk = prompts[start : start + batch]
        tokens = np.stack([p.tokens for p in chunk]).astype(np.int32)
        logits = logits_fn(tokens)
        last = np.asarray(logits if logits.ndim == 2 else logits[:, -1])
        correct.extend(np.argmax(last, axis=-1) == [p.answer for p in chunk])
    residue = np.array([p.residue for p in prompts])
    modulus = int(residue.max()) + 1
    correct = np.asarray(correct, dtype=bool)
    counts = np.bincount(residue, minlength=modulus)
    hits = np.bincount(residue, weights=correct, minlength=modulus)
    return {
        "correct": correct.tolist(),
        "residue": residue.tolist(),
        "residue_counts": counts.tolist(),
        "residue_accuracy": (hits / np.maximum(counts, 1)).tolist(),
        "accuracy": float(correct.mean()),
    }


def checkpoint_scorer(directory):
    """`(config, logits_fn)` of one seed's pretrained checkpoint (`sims.pretrain.checkpoint`);
    the function returns the last position's logits `(B, V)` alone, sliced on the device."""
    # jax only to score checkpoints: the lookup's designs and reports read without it
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from weakspots.idealized.pretrain.model import merge
    from weakspots.sims.pretrain import checkpoint

    config, params = checkpoint.load(directory)
    graph, state = nnx.split(merge(config, params))

    @jax.jit
    def last_logits(state, tokens):
        return nnx.merge(graph, state)(tokens)[:, -1]

    return config, lambda tokens: np.asarray(last_logits(state, jnp.asarray(tokens, jnp.int32)))


STRONG_HARMONIC = 0.5  # a harmonic counts toward the period at half the strongest's amplitude


def dominant_period(accuracy) -> float | None:
    """The fundamental period of the residue profile's strong harmonics: `modulus / g`, `g`
    the gcd of the harmonics `k >= 1` whose amplitude (`metrics.harmonic_spectrum`) is at
    least half the strongest's; None for a flat profile.

    A pattern of period S has harmonics only at multiples of `modulus / S`, and a sharp one
    (one weak phase of S) has several of equal amplitude, so the strongest alone can name a
    divisor of S; their gcd names S.
    """
    spectrum = metrics.harmonic_spectrum(accuracy)[1:]
    if spectrum.size == 0 or np.max(spectrum) <= 1e-12:
        return None
    strong = 1 + np.flatnonzero(spectrum >= STRONG_HARMONIC * np.max(spectrum))
    return len(accuracy) / math.gcd(*strong.tolist())


def report_of_accuracy(accuracy, prompts_per_residue: int) -> dict:
    """`report` of per-seed residue accuracies `(seeds, residues)`, every residue scored on
    `prompts_per_residue` prompts (a recorded report's numbers, or planted ones)."""
    accuracy = np.asarray(accuracy, dtype=np.float64)
    counts = [int(prompts_per_residue)] * accuracy.shape[1]
    return report([{"residue_accuracy": a.tolist(), "residue_counts": counts} for a in accuracy])


def report(per_seed_results: list[dict]) -> dict:
    """Statistics over seeds (each an `evaluate` result on the same prompts).

    `residue_accuracy` `(seeds, residues)`; per residue the mean over seeds, its interval
    with seeds as clusters (`metrics.cluster_interval`) and the Wilson interval of the
    pooled trials; the gap (best - worst residue of the mean), whether it is beyond both
    intervals (the worst residue's upper bound below the best's lower bound) and the
    seeds' noise floor of a gap (`metrics.cluster_range_floor`); the dominant period of the
    mean profile; the mean accuracy with its cluster interval.
    """
    if not per_seed_results:
        raise ValueError("report needs at least one seed's result")
    accuracy = np.array([r["residue_accuracy"] for r in per_seed_results], dtype=np.float64)
    counts = np.array([r["residue_counts"] for r in per_seed_results])
    if np.any(counts != counts[0]) or np.any(counts[0] != counts[0, 0]):
        raise ValueError("every seed must be scored on the same prompts, as many per residue")
    samples = int(counts[0, 0])
    seeds, modulus = accuracy.shape
    mean = accuracy.mean(axis=0)
    cluster = np.array(
        [metrics.cluster_interval(accuracy[:, r], samples)[1:] for r in range(modulus)]
    )
    wilson = metrics.wilson_interval(mean, seeds * samples)
    best, worst = int(np.argmax(mean)), int(np.argmin(mean))
    overall = accuracy.mean(axis=1)
    return {
        "seeds": seeds,
        "modulus": modulus,
        "prompts_per_residue": samples,
        "residue_accuracy": accuracy.tolist(),
        "residue_mean": mean.tolist(),
        "residue_interval": cluster.tolist(),
        "residue_wilson": wilson.tolist(),
        "best_residue": best,
        "worst_residue": worst,
        "gap": float(mean[best] - mean[worst]),
        "gap_beyond_intervals": bool(cluster[worst, 1] < cluster[best, 0]),
        "gap_noise_floor": _finite(metrics.cluster_range_floor(accuracy)),
        "seed_gaps": metrics.delta_max(accuracy).tolist()
        if seeds > 1
        else [metrics.delta_max(accuracy[0])],
        "dominant_period": dominant_period(mean),
        "harmonic_spectrum": metrics.harmonic_spectrum(mean).tolist(),
        "mean_accuracy": float(overall.mean()),
        "mean_interval": list(metrics.cluster_interval(overall, samples * modulus)[1:]),
    }


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else float(value)
