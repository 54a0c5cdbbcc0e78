"""`--task records`: the paper's position-matched needle over four-token key-value records.

A prompt is

    intro + [n]*p + record_0 ... record_{N-1} + [n]*(3 - p) + lead + key + sep

with `n` the neutral token. Each record is four tokens: a key of two one-token words, a
separator, and a one-token digit (its value); keys are distinct within a prompt. The
target record sits near the middle; the question repeats its key and separator, and the
answer is its digit. Every prompt of a scan has the same length, so the query position
is fixed. The target key's position `t` (its first token) sets the residue
`r = t mod R`, `R = lcm(strides)` (the design period); prefix padding `p` in 0..3
shifts all records together.

Groups differ in phase only: each residue group's target positions have the same mean
and the same variance. Positions of group r lie on `c_r + k R` (`c_r` the point = r
mod R nearest the middle, |k| <= K); `matched_offsets` finds, for every group, `n0`
offsets with one common first and second moment (an exact search over the sums of k
and k^2). `n0 = R^2` is the fewest that allow it, so `--trials` (prompts per residue
group) must be a multiple of `R^2`. Everything is drawn from
`numpy.random.default_rng` seeded by `(seed, context, residue, index)`.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

import numpy as np

from weakspots.errors import ConfigError

from .compression import Compression
from .tokenizers import Tokenizer
from .trial import Trial

INTRO = "A list of records: each is a key of two words, a colon, and its digit."
LEAD = "\n"
SEPARATOR = ":"
NEUTRAL = " "  # the pad token: prefix padding p and 3 - p after the records
VALUES = tuple(str(d) for d in range(10))
KEY_WORDS = (
    " red", " blue", " green", " black", " white", " gold", " silver", " brown", " apple",
    " stone", " river", " house", " tree", " bird", " fish", " horse", " king", " queen",
    " moon", " star", " sun", " rain", " snow", " wind", " fire", " water", " book", " door",
    " road", " ship", " bell", " lamp", " cake", " milk", " salt", " sand", " wolf", " bear",
    " lion", " frog", " duck", " rose", " leaf", " hill", " lake", " city", " farm", " ring",
)  # fmt: skip
LETTERS = tuple(chr(c) for c in range(ord("a"), ord("z") + 1))
SPREAD = 3  # |k| <= SPREAD lattice steps of R around the middle
MAX_PERIOD = 8  # exact moments need R^2 prompts per group: 64 at R = 8


@functools.lru_cache(maxsize=16)
def matched_offsets(R: int, spread: int = SPREAD) -> tuple[tuple[int, ...], ...]:
    """For each residue r of R: `R^2` positions relative to the middle M (M = R * 1000 here,
    so that `(M + x) mod R = r`), every group with the same sum and sum of squares.

    Among the feasible common moments, the mean nearest M and then the least variance.
    """
    n, K = R * R, spread
    S1, S2 = n * K, n * K * K
    reach = [np.zeros((2 * S1 + 1, S2 + 1), bool)]
    reach[0][S1, 0] = True
    for _ in range(n):  # reach[c][s1 + S1, s2]: c lattice steps k with sums s1, s2
        prev, nxt = reach[-1], np.zeros_like(reach[-1])
        for k in range(-K, K + 1):
            rows = prev.shape[0]
            nxt[max(0, k) : rows - max(0, -k), k * k :] |= prev[
                max(0, -k) : rows - max(0, k), : prev.shape[1] - k * k
            ]
        reach.append(nxt)
    final = np.argwhere(reach[-1])
    s1, s2 = final[:, 0] - S1, final[:, 1]
    M = 1000 * R
    centres = [M + (r - M) % R - (R if (r - M) % R >= R / 2 else 0) for r in range(R)]
    common = None
    for c in centres:  # the (sum t, sum t^2) each group can reach
        pairs = set(
            zip(
                (n * c + R * s1).tolist(),
                (n * c * c + 2 * c * R * s1 + R * R * s2).tolist(),
                strict=True,
            )
        )
        common = pairs if common is None else common & pairs
    if not common:
        raise ConfigError("stride", f"no position-matched design at period {R}")
    A, B = min(common, key=lambda ab: (abs(ab[0] / n - M), ab[1] / n - (ab[0] / n) ** 2, ab))
    groups = []
    for c in centres:
        t1 = (A - n * c) // R
        t2 = (B - n * c * c - 2 * c * R * t1) // (R * R)
        ks = []
        for level in range(n, 0, -1):
            for k in range(-K, K + 1):
                a, b = t1 - k, t2 - k * k
                if -S1 <= a <= S1 and 0 <= b <= S2 and reach[level - 1][a + S1, b]:
                    ks.append(k)
                    t1, t2 = a, b
                    break
        groups.append(tuple(sorted(c + R * k - M for k in ks)))
    return tuple(groups)


class _Layout:
    """The task's pieces in the tokenizer's ids (each must be one token where noted)."""

    def __init__(self, tokenizer: Tokenizer, neutral: str):
        def one(text):
            ids = tokenizer.encode(text)
            return ids[0] if len(ids) == 1 else None

        self.neutral = one(neutral)
        if self.neutral is None:
            raise ConfigError("neutral", f"must be one token of the tokenizer; {neutral!r} is not")
        self.intro = list(tokenizer.encode(INTRO))
        self.lead = list(tokenizer.encode(LEAD))
        self.separator = one(SEPARATOR)
        self.values = [one(v) for v in VALUES]
        if self.separator is None or None in self.values:
            raise ConfigError(
                "tokenizer", f"the records task needs {SEPARATOR!r} and each digit as one token"
            )
        words = [w for w in KEY_WORDS if one(w) is not None]
        if len(words) < 12:
            words = [w for w in LETTERS if one(w) is not None]
        self.words = [one(w) for w in words]


def record_trials(config, tokenizer: Tokenizer, lead=(), trail=()) -> list:
    """Every trial of a `records` scan (module docstring), residue by residue. `lead`, `trail`:
    ids the model reads before the intro and after the question (a BOS token, a chat template)."""
    R = config.period
    if R > MAX_PERIOD:
        raise ConfigError(
            "stride", f"the records task resolves periods up to {MAX_PERIOD}; lcm is {R}"
        )
    if config.trials % (R * R):
        raise ConfigError(
            "trials",
            f"the records task needs a multiple of {R * R} prompts per residue group at period "
            f"{R} (equal position moments); got {config.trials}",
        )
    layout = _Layout(tokenizer, NEUTRAL)
    layout.intro = list(lead) + layout.intro
    layout.trail = list(trail)
    offsets = matched_offsets(R)
    trials = []
    for context in config.context:
        question = len(layout.lead) + 3 + len(layout.trail)
        records = (int(context) - len(layout.intro) - 3 - question) // 4
        reach = max(abs(x) for group in offsets for x in group) + R
        if records < 2 * (reach // 4 + 2) or records > len(layout.words) * (len(layout.words) - 1):
            raise ConfigError(
                "context", f"{context} tokens hold {records} records; the records task needs "
                f"at least {2 * (reach // 4 + 2)} and at most as many as distinct keys",
            )  # fmt: skip
        start = len(layout.intro)
        middle = start + 4 * (records // 2)
        base = middle - (middle % R)  # = 0 mod R, so base + x has x's residue
        for r, group in enumerate(offsets):
            for j in range(config.trials):
                t = base + group[j % len(group)]
                trials.append(_trial(config, layout, int(context), records, r, j, t, Trial))
    return trials


def _trial(config, layout: _Layout, context: int, records: int, r: int, j: int, t: int, Trial):
    rng = np.random.default_rng([config.seed, context, r, j])
    start = len(layout.intro)
    p = (t - start) % 4
    target = (t - start - p) // 4
    W = len(layout.words)
    pairs = rng.choice(W * (W - 1), size=records, replace=False)
    first, second = pairs // (W - 1), pairs % (W - 1)
    second = second + (second >= first)  # two different words per key
    values = rng.integers(0, len(layout.values), size=records)
    body = []
    for a, b, v in zip(first, second, values, strict=True):
        body += [layout.words[a], layout.words[b], layout.separator, layout.values[v]]
    key = [layout.words[first[target]], layout.words[second[target]]]
    prompt = (
        layout.intro
        + [layout.neutral] * p
        + body
        + [layout.neutral] * (3 - p)
        + layout.lead
        + key
        + [layout.separator]
        + layout.trail
    )
    assert prompt[t : t + 2] == key, "the target key is where the design put it"
    coordinates = {
        "context": context,
        "depth": None,
        "group": j,
        "needle_shift": r,
        "tail_shift": 0,
        "target_position": t,
        "query_position": len(prompt) - 3 - len(layout.trail),
    }
    answer = VALUES[values[target]]
    return Trial(coordinates, tuple(prompt), answer, (layout.values[values[target]],), t,
                 r * config.trials + j, 1)  # fmt: skip


def plan_rows(trials) -> list[dict]:
    """One row per prompt: residue, target position, query position (the question's key) and
    length; the query position is the same in every prompt."""
    rows = []
    for trial in trials:
        length = trial.prompt_length
        rows.append(
            {
                "residue": trial.coordinates["needle_shift"],
                "target_position": trial.needle_index,
                "query_position": trial.coordinates["query_position"],
                "length": length,
                "context": trial.coordinates["context"],
                "index": trial.coordinates["group"],
            }
        )
    return rows


def write_plan(trials, path: str) -> int:
    """Write `plan_rows` as JSON lines to `path`; returns the number of rows."""
    rows = plan_rows(trials)
    with open(path, "w") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    return len(rows)


def moments(rows: list[dict]) -> dict[int, tuple[float, float]]:
    """Per residue: the mean and variance of the target position."""
    out = {}
    for r in sorted({row["residue"] for row in rows}):
        t = np.array([row["target_position"] for row in rows if row["residue"] == r], float)
        out[r] = (float(t.mean()), float(t.var()))
    return out


__all__ = [
    "deepseek_profiles",
    "matched_offsets",
    "moments",
    "plan_rows",
    "record_trials",
    "write_plan",
]


def deepseek_profiles() -> dict:
    """The paper's five DeepSeek profiles of this test (`data/deepseek_profiles.json`: per
    residue mod 8, `correct` of `n`, accuracy `acc` and its Wilson bounds `lo`, `hi`, in %)."""
    return json.loads(
        resources.files("weakspots.probe").joinpath("data/deepseek_profiles.json").read_text()
    )


def check_protocols(config) -> None:
    """Refuse, before any model load or request, what the records and flip tasks and the
    compression fields cannot run (a `ConfigError` naming the flag)."""
    object.__setattr__(config, "candidates", tuple(config.candidates))
    if config.compress is not None:
        if config.backend != "hf":
            raise ConfigError("compress", "compression applies to the hf backend only")
        Compression(config.compress, config.window, config.compress_stride, config.local_window,
                    config.seed, config.compress_weights)  # fmt: skip
    else:
        for name, default in (("compress_stride", None), ("compress_weights", None)):
            if getattr(config, name) != default:
                raise ConfigError(name, "applies with --compress only")
    if config.task == "records":
        if config.period > MAX_PERIOD:
            raise ConfigError(
                "stride",
                f"the records task resolves periods up to {MAX_PERIOD}; lcm is {config.period}",
            )
        if config.trials % (config.period**2):
            raise ConfigError(
                "trials",
                f"the records task needs a multiple of {config.period**2} prompts per residue "
                f"group at period {config.period} (equal position moments); got {config.trials}",
            )
    if config.task == "flip":
        if config.backend == "decoder":
            raise ConfigError("task", "flip needs the openai or hf backend")
        if not config.prefix:
            raise ConfigError("prefix", "the flip task needs the prompt's end (--prefix TEXT)")
        if len(config.candidates) < 2 or len(set(config.candidates)) < len(config.candidates):
            raise ConfigError("candidate", "the flip task needs two or more different candidates")
        if config.lengths is not None and config.lengths < 4 * config.period:
            raise ConfigError(
                "lengths", f"at least four periods ({4 * config.period}), got {config.lengths}"
            )
        if not isinstance(config.families, int) or config.families < 1:
            raise ConfigError("families", f"an integer >= 1, got {config.families}")
    elif config.prefix is not None or config.candidates or config.lengths is not None:
        raise ConfigError("prefix", "--prefix, --candidate and --lengths apply to --task flip")
