"""Which mechanism makes the weak spot in a decoder design, decided from measured interventions.

Three candidate mechanisms, and the measurement that shows each (`evidence`):

* **straddle**: the fact crosses a window boundary, so no single compressed entry holds
  key and value. It predicts that straddling facts score below same-window facts, that
  the weak value phases are the straddle phases (`straddle_phases`: value phase
  `p < key_len` or `p + value_len > s`, which moves with the key length), and that the
  phases where no fact straddles show no weak spot of their own.
* **pooling specialisation** (the toy's mechanism): a learned per-phase pooling bias
  favours some phases. It predicts that zeroing the bias relieves the weak phase, and
  that rolling it by one phase moves the weak spot one phase on (the accuracy order of
  the weak phase and the next one flips beyond their intervals).
* **RoPE anchoring**: compressed keys carry their window's first position. It predicts
  that removing RoPE from the compressed keys relieves the weak phase.

Activation patching (`interventions.patch_entries`) says where the weak spot lives:
copying the weak-phase fact's compressed entries from a world where the same fact sits
at the best phase restores the accuracy (it was written into the entries) or does not
(it is in how the query reads them). `verdict` names every mechanism whose test passes;
`none` when there is no weak spot beyond the intervals (`phase_accuracy_ci`: seeds as
clusters in reports from `interventions.ablate_lm`), `unexplained` when there is
one and no test passes (`unexplained, in the entries` when patching locates it in the
compressed entries all the same).

`attention_margins` measures what the toy's theory needs from a trained decoder: the
compressed layer's attention margin on the queried fact, and from it the effective gain
`beta = s * mean_phi margin[phi]` (the toy's needle logit is `beta alpha[phi]` against
mean-zero distractors, and the phase weights sum to one).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from weakspots.idealized.decoder.config import LMConfig
from weakspots.idealized.decoder.layers.registry import lookup as layer_kind
from weakspots.idealized.decoder.model import trace
from weakspots.idealized.decoder.recall import placed_batch
from weakspots.sims.decoder.evaluate import report_noise_floor
from weakspots.sims.decoder.interventions import Rows, evaluation_key, evaluation_rows
from weakspots.sims.decoder.train import jit, merge

MECHANISMS = ("straddle", "pooling specialisation", "RoPE anchoring")
RESTORED = 0.5  # patching "restores" the weak phase when it recovers at least half the gap
FLOOR = 1e-30  # attention probabilities are clipped here before the log (float32 underflow)


# ----------------------------------------------------------------------------- attention margins


@partial(jit, static_argnums=(0, 1))
def _margins(config: LMConfig, layer: int, params: nnx.State, starts, index, fact_windows):
    """Per run, sequence and head: log attention on the fact's best entry minus the mean over the others."""
    s, task = config.stride, config.task
    t = task.context_len + task.key_len - 1  # predicts the first query's first value token
    windows = config.seq_len // s
    visible = jnp.arange(windows) < (t + 1) // s

    def per_run(run_params):
        def chunk(args):
            rows, i, facts = args
            batch = placed_batch(evaluation_key(config, i), task, rows)
            model = merge(config.decoder, run_params)  # here: tracing sows into the model
            _, sown = trace(model, batch.tokens)
            probs = sown["blocks"][layer]["attention"]["attention"][0][:, :, t, :windows]
            logp = jnp.log(jnp.maximum(probs, FLOOR))  # (B, H, C)
            fact = facts[:, None, :] & visible[None, None, :]
            other = ~facts[:, None, :] & visible[None, None, :]
            best = jnp.max(jnp.where(fact, logp, -jnp.inf), axis=-1)
            rest = jnp.sum(jnp.where(other, logp, 0.0), axis=-1) / jnp.sum(other, axis=-1)
            mass = jnp.sum(jnp.where(fact, probs, 0.0), axis=-1)
            return best - rest, mass

        margin, mass = jax.lax.map(chunk, (starts, index, fact_windows))
        heads = margin.shape[-1]
        return margin.reshape(-1, heads), mass.reshape(-1, heads)

    return jax.vmap(per_run)(params)


def _fact_windows(config: LMConfig, rows: Rows, shift: int = 0) -> np.ndarray:
    """Per evaluation sequence, the windows holding the queried fact, moved `shift` windows on
    (`(sequences, C)` bool; windows past the sequence drop out)."""
    s, length = config.stride, config.task.fact_len
    windows = np.arange(config.seq_len // s)[None, :]
    first, last = rows.key_start // s, (rows.key_start + length - 1) // s
    return (windows >= first[:, None] + shift) & (windows <= last[:, None] + shift)


def _fact_attention(config: LMConfig, params: nnx.State, rows: Rows, shift: int = 0):
    """`(layer, margin, mass)` of the first compressed layer on the entries `shift` windows
    after the queried fact's own, each `(R, H, s)` by value phase (far facts only); None for
    a design without compressed entries."""
    config = config.static
    layers = [i for i, k in enumerate(config.layer_kinds) if layer_kind(k).pooled_by_operator]
    if not config.compressed or not layers:
        return None
    facts = _fact_windows(config, rows, shift)
    chunk = rows.starts.shape[1]
    margin, mass = _margins(
        config,
        layers[0],
        params,
        jnp.asarray(rows.starts),
        jnp.asarray(rows.index),
        jnp.asarray(facts.reshape(-1, chunk, facts.shape[-1])),
    )
    phase = rows.value_start % config.stride
    by_phase = lambda a: np.stack(  # noqa: E731
        [np.asarray(a, np.float64)[:, rows.far & (phase == p)].mean(axis=1)
         for p in range(config.stride)],
        axis=-1,
    )  # fmt: skip
    return layers[0], by_phase(margin), by_phase(mass)


def entry_mass(config: LMConfig, params: nnx.State, shift: int = 1) -> list | None:
    """Attention mass of the first compressed layer on the entries `shift` windows after the
    queried fact's own, by head and value phase, `(R, H, s)` (far facts only; as `mass` of
    `attention_margins`, which is `shift = 0`). Where it exceeds the mass on the fact's own
    entries, the query reads the fact from windows after it. None without compressed entries."""
    found = _fact_attention(config, params, evaluation_rows(config.static), shift)
    return None if found is None else found[2].tolist()


def attention_margins(config: LMConfig, params: nnx.State, rows: Rows | None = None) -> dict:
    """The first compressed layer's attention on the queried fact, by head and value phase.

    `params` stacked over R runs. At the position that predicts the first query's value,
    per head: the margin (log attention on the fact's best entry minus the mean log
    attention on the other visible entries, i.e. the score difference), and the attention
    mass on the fact's entries; far facts only, averaged per value phase. Returns
    `margin` and `mass` `(R, H, s)`, `gain` `(R, H)` = `s * mean_phi margin`, and `layer`.
    None for a design without compressed entries.
    """
    found = _fact_attention(config, params, rows or evaluation_rows(config.static))
    if found is None:
        return None
    layer, margin, mass = found
    return {
        "layer": layer,
        "margin": margin.tolist(),
        "mass": mass.tolist(),
        "gain": (config.stride * margin.mean(axis=-1)).tolist(),
    }


# ----------------------------------------------------------------------------- evidence, verdict


def straddle_phases(config: LMConfig) -> list[int]:
    """Value phases at which every fact straddles a window boundary: `p < key_len` or `p + value_len > s`."""
    s, task = config.stride, config.task
    return [p for p in range(s) if p < task.key_len or p + task.value_len > s]


def _separated(ci_low, ci_high) -> bool:
    """True when an interval `ci_low` lies wholly above `ci_high`."""
    return bool(ci_low[0] > ci_high[1])


def _component(report: dict, kind: str) -> dict | None:
    found = [c for c in report["components"] if c["kind"] == kind]
    return found[0] if found else None


def evidence(config: LMConfig, report: dict) -> dict:
    """Every test of the module docstring on one design's `interventions.ablate_lm` report.

    Returns plain values: the worst and best phase, whether the weak spot is beyond the
    intervals (`weak_spot`, which decides the verdict) and whether `delta_max` is beyond its
    95% noise floor (`beyond_noise_floor`: Tukey's test over the seeds where the report holds
    per-seed accuracies, a sharper test of a phase effect than separated intervals with few
    seeds; None for a report without `samples`), and per mechanism its test's outcome (None
    where the design lacks the component) with the numbers that decided it.
    """
    acc = np.asarray(report["phase_accuracy"])
    ci = np.asarray(report["phase_accuracy_ci"])
    s = acc.size
    worst, best = int(np.argmin(acc)), int(np.argmax(acc))
    nxt = (worst + 1) % s
    weak = _separated(ci[best], ci[worst])
    straddles = straddle_phases(config)
    same = [p for p in range(s) if p not in straddles]
    split = report["straddle"]
    straddle_hurts = split["straddling"]["samples"] > 0 and _separated(
        split["same_window"]["ci"], split["straddling"]["ci"]
    )
    if len(same) >= 2:
        sw_best = max(same, key=lambda p: acc[p])
        sw_worst = min(same, key=lambda p: acc[p])
        same_window_weak = _separated(ci[sw_best], ci[sw_worst])
    else:
        same_window_weak = None
    floor = None
    if "samples" in report:
        floor = report_noise_floor(acc, report["samples"], report.get("phase_accuracy_per_seed"))
    out = {
        "worst_phase": worst,
        "best_phase": best,
        "delta_max": float(acc[best] - acc[worst]),
        "weak_spot": weak,
        "beyond_noise_floor": None if floor is None else bool(acc[best] - acc[worst] > floor),
        "straddle_phases": straddles,
        "straddle": {
            "straddling_below_same_window": bool(straddle_hurts),
            "worst_is_straddle_phase": worst in straddles,
            "weak_spot_without_straddling": same_window_weak,
            "straddling": split["straddling"]["accuracy"],
            "same_window": split["same_window"]["accuracy"],
        },
    }
    out["straddle"]["passes"] = bool(weak and straddle_hurts and worst in straddles)
    zero = _component(report, "zero_position_bias")
    roll = _component(report, "roll_position_bias")
    if zero is None or roll is None:
        out["pooling"] = None
    else:
        relief = zero["drop_ci"][worst][1] < 0
        rolled = np.asarray(roll["accuracy_ci"])
        follows = _separated(rolled[worst], rolled[nxt]) and not _separated(ci[worst], ci[nxt])
        out["pooling"] = {
            "zero_bias_relieves_worst": bool(relief),
            "zero_bias_drop_at_worst": zero["drop"][worst],
            "zero_bias_drop_at_worst_ci": zero["drop_ci"][worst],
            "roll_moves_weak_spot": bool(follows),
            "rolled_accuracy_worst_next": [roll["accuracy"][worst], roll["accuracy"][nxt]],
            "passes": bool(weak and (relief or follows)),
        }
    rope = _component(report, "no_rope_compressed")
    if rope is None:
        out["rope"] = None
    else:
        relief = rope["drop_ci"][worst][1] < 0
        out["rope"] = {
            "no_rope_relieves_worst": bool(relief),
            "no_rope_drop_at_worst": rope["drop"][worst],
            "no_rope_drop_at_worst_ci": rope["drop_ci"][worst],
            "no_rope_mean_drop": float(np.mean(rope["drop"])),
            "passes": bool(weak and relief),
        }
    patch = report.get("patch")
    if patch is None or worst == best:
        out["patch"] = None
    else:
        restored = patch["restored"][worst][best]
        out["patch"] = {
            "clean": patch["clean"][worst][best],
            "patched": patch["patched"][worst][best],
            "source": patch["source"][worst][best],
            "restored": restored,
            "in_entries": restored is not None and restored >= RESTORED,
        }
    return out


def verdict(found: dict) -> str:
    """The mechanism(s) the evidence supports: `none`, `unexplained` (`, in the entries`), or
    names joined by ` + `."""
    if not found["weak_spot"]:
        return "none"
    named = [
        name
        for name, key in zip(MECHANISMS, ("straddle", "pooling", "rope"), strict=True)
        if found.get(key) and found[key]["passes"]
    ]
    if named:
        return " + ".join(named)
    patch = found.get("patch")
    return "unexplained, in the entries" if patch and patch["in_entries"] else "unexplained"


def _patched(restored: float) -> str:
    """What copying the weak fact's entries from the best phase did, as a fraction of the gap."""
    where = "patching its entries from the best phase"
    if restored < 0:
        return f"{where} lowers the worst phase further (by {-restored:.1f} times the gap)"
    if restored > 1:
        return f"{where} lifts the worst phase past the best ({restored:.1f} times the gap)"
    return f"{where} restores {restored:.0%} of the gap"


def shown_by(found: dict) -> str:
    """One line naming the interventions and measurements behind `verdict(found)`."""
    if not found["weak_spot"]:
        return f"no weak spot beyond the intervals (delta_max {found['delta_max']:.3f})"
    parts = []
    st = found["straddle"]
    if st["passes"]:
        extra = {
            True: "; a weak spot remains without straddling",
            False: "; none without straddling",
            None: "",
        }[st["weak_spot_without_straddling"]]
        parts.append(
            f"straddling facts {st['straddling']:.3f} < same-window {st['same_window']:.3f}, "
            f"worst phase {found['worst_phase']} is a straddle phase{extra}"
        )
    pooling = found.get("pooling")
    if pooling and pooling["passes"]:
        what = []
        if pooling["zero_bias_relieves_worst"]:
            what.append(
                f"zeroing the bias lifts the worst phase by {-pooling['zero_bias_drop_at_worst']:.3f}"
            )
        if pooling["roll_moves_weak_spot"]:
            what.append("rolling the bias moves the weak spot one phase on")
        parts.append("; ".join(what))
    rope = found.get("rope")
    if rope and rope["passes"]:
        parts.append(
            f"removing RoPE from compressed keys lifts the worst phase by {-rope['no_rope_drop_at_worst']:.3f}"
        )
    patch = found.get("patch")
    if patch and patch["restored"] is not None:
        parts.append(_patched(patch["restored"]))
    return "; ".join(parts) if parts else "no intervention or task variant accounts for it"
