"""What a probe asks: its config and the trials of a scan, built in token space.

A text task (`passkey`, `kv`) is laid out per grid cell (context length C, depth) as
paired groups. One group is one draw of filler and answer; its `S` prompts
(`S = lcm(strides)`, the design period) are the same tokens shifted:

    prompt(k, t) = [n]*k + before + needle + after[:len(after) - k] + [n]*t + question

with `n` the neutral token. `before` is cut so that, at k = 0, the answer's first token
(its first occurrence) sits at an index that is a multiple of `S`, and the prompt's
length at k = t = 0 is a multiple of `S` too. So the needle phase (answer index mod s)
is `k mod s` and the tail phase (prompt length mod s) is `t mod s` exactly, for every
stride s dividing S. Group g of a cell takes `t = (k + g) mod S`: every group visits each
needle phase and each tail phase once, and S consecutive groups cross them fully (a
Latin square), so the two phases are balanced and independent.

The `recall` task is the associative recall a decoder of this project was trained on
(`idealized.decoder.recall`, in the decoder's own vocabulary): the first-queried fact's value
at a start of each phase, beyond the reach of the uncompressed windows, the other facts
placed uniformly around it (`recall.placed_starts`); the prompt is the context and the
first query's key, the answer the value's tokens. Its prompts all have one length.

Everything is drawn from `numpy.random.default_rng` seeded by `(seed, C, depth, group)`,
so a scan is the same for the same config, and adding a cell changes no other cell.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from weakspots.idealized.toy.config import ConfigError

from .tokenizers import Tokenizer

TASKS = ("passkey", "kv", "recall")
BACKENDS = ("openai", "hf", "decoder")

FILLER = (
    " The grass is green.",
    " The sky is blue.",
    " The sun is yellow.",
    " Here we go.",
    " There and back again.",
)
PASSKEY = ("The pass key is", " {digits}", ". Remember it.", " {digits}", " is the pass key.")
PASSKEY_QUESTION = " What is the pass key? The pass key is"
FACT = (" The value of key {name} is", " {value}", ".")
FACT_QUESTION = " What is the value of key {name}? The value of key {name} is"
NAMES = (
    "amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "heron", "iris", "jade",
    "kelp", "lotus", "maple", "north", "onyx", "pearl", "quartz", "raven", "sable", "tulip",
    "umber", "vale", "willow", "xenon", "yarrow", "zephyr", "aspen", "basil", "coral", "dune",
)  # fmt: skip
ANSWER_MARGIN = 2  # generated tokens beyond the answer's own: enough to see where it ends


@dataclass(frozen=True)
class ProbeConfig:
    """One phase scan: what to ask (task, design), whom (backend), and how to run it.

    Field names are the flags of `weakspots probe`. `stride`, `context`, `depth` are
    tuples (a grid); the design period is `lcm(stride)`. `trials` is the number of
    paired groups per (context, depth) cell, each `period` prompts. `depth` in [0, 1] is
    where the needle sits in the filler (ignored by `recall`, whose values are placed
    uniformly). `digits`: length of a pass key or value; `facts`: facts of the `kv` task
    (one queried). `neutral`: the text of the one token the design shifts by.
    """

    backend: str = "openai"
    url: str | None = None
    model: str | None = None
    tokenizer: str = "auto"
    checkpoint: str | None = None
    task: str = "passkey"
    stride: tuple[int, ...] = (4,)
    context: tuple[int, ...] = (2048,)
    depth: tuple[float, ...] = (0.5,)
    trials: int = 8
    digits: int = 5
    facts: int = 4
    seed: int = 0
    neutral: str = " "
    concurrency: int = 4
    max_retries: int = 5
    timeout: float = 120.0
    store: str | None = None
    resume: bool = False

    def __post_init__(self):
        for name in ("stride", "context", "depth"):
            value = getattr(self, name)
            if isinstance(value, int | float):
                object.__setattr__(self, name, (value,))
            elif not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        if self.backend not in BACKENDS:
            raise ConfigError("backend", f"one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.task not in TASKS:
            raise ConfigError("task", f"one of {', '.join(TASKS)}, got {self.task!r}")
        if self.backend == "openai" and not self.url:
            raise ConfigError("url", "the openai backend needs the server's URL")
        if self.backend in ("openai", "hf") and not self.model:
            raise ConfigError("model", f"the {self.backend} backend needs --model")
        if (self.backend == "decoder" or self.task == "recall") and not self.checkpoint:
            raise ConfigError(
                "checkpoint", "the decoder backend and the recall task need a decoder checkpoint"
            )
        if self.backend == "decoder" and self.task != "recall":
            raise ConfigError("task", "a decoder of this project answers the recall task only")
        if not self.stride or any(int(s) != s or s < 1 for s in self.stride):
            raise ConfigError("stride", f"positive integers, got {self.stride}")
        if self.period > 4096:
            raise ConfigError("stride", f"lcm of the strides is {self.period}; at most 4096")
        if not self.context or any(int(c) != c or c < 1 for c in self.context):
            raise ConfigError("context", f"positive integers (tokens), got {self.context}")
        if not self.depth or any(not 0.0 <= d <= 1.0 for d in self.depth):
            raise ConfigError("depth", f"fractions in [0, 1], got {self.depth}")
        for name, low in (("trials", 1), ("digits", 1), ("facts", 1), ("concurrency", 1)):
            if int(getattr(self, name)) != getattr(self, name) or getattr(self, name) < low:
                raise ConfigError(name, f"an integer >= {low}, got {getattr(self, name)}")
        if self.max_retries < 0:
            raise ConfigError("max_retries", f"an integer >= 0, got {self.max_retries}")
        if self.seed < 0:
            raise ConfigError("seed", f"an integer >= 0, got {self.seed}")
        if not self.timeout > 0:
            raise ConfigError("timeout", f"seconds > 0, got {self.timeout}")
        if self.facts > len(NAMES):
            raise ConfigError("facts", f"at most {len(NAMES)}, got {self.facts}")

    @property
    def period(self) -> int:
        """The design period S: every stride divides it."""
        return math.lcm(*(int(s) for s in self.stride))

    def replace(self, **changes) -> ProbeConfig:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Trial:
    """One prompt of a scan and what a correct continuation starts with.

    `coordinates`: where it sits in the design (context, depth, group, needle_shift,
    tail_shift), scalars. `needle_index`: token index of the answer's first token (its
    first occurrence). `block`: the paired group across the whole scan (trials of one
    block share filler and answer). `answer_ids`: the answer's tokens, for backends
    that return ids.
    """

    coordinates: dict
    prompt: tuple[int, ...]
    answer: str
    answer_ids: tuple[int, ...]
    needle_index: int
    block: int
    max_tokens: int

    @property
    def prompt_length(self) -> int:
        return len(self.prompt)


def _rng(seed: int, context: int, depth: float | None, group: int) -> np.random.Generator:
    depth_key = -1 if depth is None else round(depth * 1_000_000)
    return np.random.default_rng([seed, context, depth_key + 1, group])


class _Pieces:
    """The task's text pieces encoded once each (so every length is known in tokens)."""

    def __init__(self, tokenizer: Tokenizer, neutral: str):
        self.tokenizer = tokenizer
        self._cache: dict[str, tuple[int, ...]] = {}
        ids = self(neutral)
        if len(ids) != 1:
            raise ConfigError(
                "neutral", f"must be one token of the tokenizer; {neutral!r} is {len(ids)} tokens"
            )
        self.neutral = ids[0]
        self.sentences = [self(s) for s in FILLER]

    def __call__(self, text: str) -> tuple[int, ...]:
        if text not in self._cache:
            self._cache[text] = tuple(self.tokenizer.encode(text))
        return self._cache[text]

    def filler(self, rng: np.random.Generator, length: int, inserts: Sequence) -> list[int]:
        """`length` tokens of filler sentences from a random one on, `inserts` (token tuples)
        put between sentences at random boundaries; `length` counts the inserts."""
        room = length - sum(len(x) for x in inserts)
        out: list[int] = []
        boundaries = [0]
        i = int(rng.integers(len(self.sentences)))
        while len(out) < room:
            out.extend(self.sentences[i % len(self.sentences)])
            boundaries.append(len(out))
            i += 1
        out = out[:room]
        boundaries = [b for b in boundaries if b <= room]
        cuts = sorted(int(rng.choice(boundaries)) for _ in inserts)
        for cut, insert in sorted(zip(cuts, inserts, strict=True), key=lambda x: -x[0]):
            out[cut:cut] = list(insert)
        return out


def _digits(rng: np.random.Generator, n: int) -> str:
    return str(int(rng.integers(1, 10))) + "".join(str(d) for d in rng.integers(0, 10, n - 1))


def text_trials(config: ProbeConfig, tokenizer: Tokenizer) -> list[Trial]:
    """Every trial of a `passkey` or `kv` scan (module docstring), in a fixed order."""
    pieces = _Pieces(tokenizer, config.neutral)
    S, trials = config.period, []
    block = 0
    for context in config.context:
        for depth in config.depth:
            for group in range(config.trials):
                rng = _rng(config.seed, context, depth, group)
                base = _base(config, pieces, rng, int(context), float(depth))
                before, needle, after, question, answer_at, answer, answer_ids = base
                for k in range(S):
                    t = (k + group) % S
                    prompt = (
                        [pieces.neutral] * k
                        + before
                        + needle
                        + after[: len(after) - k]
                        + [pieces.neutral] * t
                        + question
                    )
                    coordinates = {
                        "context": int(context),
                        "depth": float(depth),
                        "group": group,
                        "needle_shift": k,
                        "tail_shift": t,
                    }
                    trials.append(
                        Trial(
                            coordinates,
                            tuple(prompt),
                            answer,
                            answer_ids,
                            answer_at + k,
                            block,
                            len(answer_ids) + ANSWER_MARGIN,
                        )
                    )
                block += 1
    return trials


def _base(config: ProbeConfig, pieces: _Pieces, rng, context: int, depth: float):
    """One group's unshifted layout: (before, needle, after, question, answer index, answer)."""
    S = config.period
    if config.task == "passkey":
        digits = _digits(rng, config.digits)
        parts = [pieces(p.format(digits=digits)) for p in PASSKEY]
        question = list(pieces(PASSKEY_QUESTION))
        answer, distractors = digits, []
    else:
        names = rng.choice(len(NAMES), size=config.facts, replace=False)
        values = [_digits(rng, config.digits) for _ in names]
        facts = [
            [pieces(p.format(name=NAMES[n], value=v)) for p in FACT]
            for n, v in zip(names, values, strict=True)
        ]
        parts = facts[0]  # the queried fact is the needle
        distractors = [sum(f, ()) for f in facts[1:]]
        question = list(pieces(FACT_QUESTION.format(name=NAMES[names[0]])))
        answer = values[0]
    answer_ids = parts[1]
    # The answer's first token: its piece's own leading space, where the tokenizer makes
    # that a token of its own (bytes do; BPE joins it to the first digit), is not the answer.
    space = pieces(" ")
    lead = len(space) if answer_ids[: len(space)] == space and len(answer_ids) > len(space) else 0
    prefix = list(parts[0]) + list(answer_ids[:lead])
    answer_ids = answer_ids[lead:]
    needle = list(parts[0]) + list(sum(parts[1:], ()))
    total = S * (context // S) - S  # the prompt's length at k = t = 0
    span = total - len(needle) - len(question) - S - sum(len(d) for d in distractors)
    low = S * math.ceil(len(prefix) / S)
    high = S * math.floor((len(prefix) + span) / S) if span >= 0 else -1
    if high < low:
        raise ConfigError(
            "context",
            f"{context} tokens is too short for the {config.task} task at stride period {S} "
            f"(the needle and question alone take {len(needle) + len(question)} tokens)",
        )
    answer_at = min(max(S * round((len(prefix) + depth * span) / S), low), high)
    a = answer_at - len(prefix)
    b = total - a - len(needle) - len(question)
    fractions = rng.random(len(distractors))
    cut = a / max(a + b - S, 1)
    inside = [d for d, f in zip(distractors, fractions, strict=True) if f < cut]
    outside = [d for d, f in zip(distractors, fractions, strict=True) if f >= cut]
    room_before = a - sum(len(d) for d in inside)
    if room_before < 0:  # not enough filler before the needle: move them after it
        outside, inside = outside + inside, []
    before = pieces.filler(rng, a, inside)
    after_filler = pieces.filler(rng, b - S, outside)
    after = after_filler + pieces.filler(rng, S, [])  # the last S tokens are cut by the shift
    return before, needle, after, question, answer_at, answer, tuple(answer_ids)


def recall_trials(config: ProbeConfig, lm_config) -> list[Trial]:
    """Every trial of a `recall` scan for a decoder trained with `lm_config` (an `LMConfig`).

    Per group, one trial per residue k of the design period: the first-queried value
    starts at a position uniform among those = k mod S beyond the uncompressed reach
    (the positions `sims.decoder.evaluate.phase_summary` counts), the other facts placed
    uniformly around it.
    """
    from weakspots.idealized.decoder.recall import placed_starts, value_starts
    from weakspots.sims.decoder.evaluate import query_reach

    task, S = lm_config.task, config.period
    positions = value_starts(task)
    far = positions < task.context_len - query_reach(lm_config)
    if far.sum() < lm_config.stride:  # as phase_summary: the reach covers the context
        far[:] = True
    candidates = positions[far]
    for k in range(S):
        if not np.any(candidates % S == k):
            raise ConfigError(
                "stride",
                f"the decoder's context has no value start = {k} mod {S} beyond its local reach",
            )
    F, K = task.filler_vocab, task.key_vocab
    kl, vl, P, ctx = task.key_len, task.value_len, task.pairs, task.context_len
    trials = []
    for group in range(config.trials):
        rng = _rng(config.seed, ctx, None, group)
        for k in range(S):
            value_at = int(rng.choice(candidates[candidates % S == k]))
            starts = placed_starts(rng, task, value_at - kl)
            keys = rng.choice(K, size=P * kl, replace=False).reshape(P, kl) + F
            values = rng.integers(0, task.value_vocab, size=(P, vl)) + F + K
            tokens = rng.integers(0, F, size=ctx)
            for start, key, value in zip(starts, keys, values, strict=True):
                tokens[start : start + kl + vl] = np.concatenate([key, value])
            prompt = tuple(int(x) for x in np.concatenate([tokens, keys[0]]))
            answer_ids = tuple(int(x) for x in values[0])
            coordinates = {
                "context": int(ctx),
                "depth": None,
                "group": group,
                "needle_shift": k,
                "tail_shift": 0,
            }
            trials.append(
                Trial(
                    coordinates,
                    prompt,
                    " ".join(map(str, answer_ids)),
                    answer_ids,
                    value_at,
                    group * S + k,  # independent draws: each trial is its own block
                    vl,
                )
            )
    return trials
