"""What a probe asks: its config and the trials of a scan, built in token space.

A text task (`passkey`, `kv`) is laid out per grid cell (context length C, depth) as
paired groups. One group is one draw of filler and answer; its `S` prompts
(`S = lcm(strides)`, the design period) are

    prompt(k, t) = lead + before + head(k) + needle + after + tail(k, t) + ending + question

where every part is whole sentences or whole task pieces (each encoded once, so every
offset is known in tokens). `head(k)` and `tail(k, t)` are filler sentences drawn for
(group, k) and (group, k, t) with exact token lengths (`Filler.exact`): `head(k)` puts
the answer's first token at an index = k mod S, `tail(k, t)` makes the prompt's length
T0 + t (T0 a multiple of S, the same for every group of the cell). So the needle phase
(answer index mod s) is `k mod s` and the tail phase (length mod s) `t mod s` exactly,
for every stride s dividing S, and the phases are moved by filler text alone: no run of
a repeated token, no sentence cut. The last part before the question (`ending`, whole
sentences of the group) and the question are the same text for every prompt of a group,
whatever its phases. `lead` is what the model reads before the text (a BOS token, a
chat template's opening; empty by default) and `trail` what follows the question (a chat
template's closing). Group g of a cell takes `t = (k + g) mod S`: every group visits each
needle phase and each tail phase once, and S consecutive groups cross them fully (a Latin
square), so the two phases are balanced and independent.

The control design (`control=True`) draws the same filler for the same (group, k, t) but
at the lengths of k = t = 0: its shifts change the text, not the positions the model
reads, so a phase effect there is the text's, not the phase's. Its report is by the
labels k and t.

The `recall` task is the associative recall a decoder of this project was trained on
(`idealized.decoder.recall`, in the decoder's own vocabulary): the first-queried fact's value
at a start of each phase, beyond the reach of the uncompressed windows, the other facts
placed uniformly around it (`recall.placed_starts`); the prompt is the context and the
first query's key, the answer the value's tokens. Its prompts all have one length.

Everything is drawn from `numpy.random.default_rng` seeded by `(seed, C, depth, group)`
(and k, t for the shifts' filler), so a scan is the same for the same config, and adding
a cell changes no other cell.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from weakspots.errors import ConfigError

from .compression import Compression, register
from .records import check_protocols, record_trials
from .tokenizers import Tokenizer
from .trial import Trial

TASKS = ("passkey", "kv", "recall", "records", "flip")
BACKENDS = ("openai", "hf", "decoder")
PROMPTS = ("auto", "ids", "text")
DTYPES = ("auto", "float32", "bfloat16", "float16")

FILLER = (
    " The grass is green.",
    " The sky is blue.",
    " The sun is yellow.",
    " Here we go.",
    " There and back again.",
    " The river runs to the sea.",
    " Birds sing in the morning.",
    " It rained all day.",
    " The road was long and quiet.",
    " A cat slept by the warm fire.",
    " Snow fell on the hills.",
    " We walked home.",
    " The old clock on the wall ticked slowly.",
    " Leaves turn red in autumn.",
    " The bread is fresh.",
    " Stars shine at night.",
)
PASSKEY = (" The pass key is", " {digits}", ". Remember it.", " {digits}", " is the pass key.")
PASSKEY_QUESTION = " What is the pass key? The pass key is"
FACT = (" The value of key {name} is", " {value}", ".")
FACT_QUESTION = " What is the value of key {name}? The value of key {name} is"
ENDING_SENTENCES = 2  # whole sentences before the question, the same for a group's prompts
NAMES = (
    "amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "heron", "iris", "jade",
    "kelp", "lotus", "maple", "north", "onyx", "pearl", "quartz", "raven", "sable", "tulip",
    "umber", "vale", "willow", "xenon", "yarrow", "zephyr", "aspen", "basil", "coral", "dune",
)  # fmt: skip
ANSWER_MARGIN = 2  # generated tokens beyond the answer's own: enough to see where it ends
REPLY_MARGIN = 24  # a chat reply's tokens beyond the answer's: room for "The pass key is"


@dataclass(frozen=True)
class ProbeConfig:
    """One phase scan: what to ask (task, design), whom (backend), and how to run it.

    Field names are the flags of `weakspots probe`. `stride`, `context`, `depth` are
    tuples (a grid); the design period is `lcm(stride)`. `trials` is the number of
    paired groups per (context, depth) cell, each `period` prompts. `depth` in [0, 1] is
    where the needle sits in the filler (ignored by `recall`, whose values are placed
    uniformly). `digits`: length of a pass key or value; `facts`: facts of the `kv` task
    (one queried). `control`: the control design (module docstring). `prompt`: how an
    openai server gets prompts (`ids`; `text`, checked by a round trip through the server's
    tokenizer; `auto`: ids where the server takes them). `dtype`, `device`, `chat`,
    `system`, `bos`: the hf backend's precision, device, chat template (with a system
    prompt), and BOS token (`auto`: where the tokenizer adds one).
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
    control: bool = False
    prompt: str = "auto"
    dtype: str = "auto"
    device: str = "auto"
    chat: bool = False
    system: str | None = None
    bos: str = "auto"
    concurrency: int = 4
    max_retries: int = 5
    timeout: float = 120.0
    store: str | None = None
    resume: bool = False
    # the paper's protocols (probe/records.py, probe/flip.py) and compression (probe/compression.py)
    compress: str | None = None
    window: int = 4
    compress_stride: int | None = None
    local_window: int = 16
    compress_weights: str | None = None
    # a KV-cache press at prefill (probe/press.py): kvpress's or the project's
    press: str | None = None
    question_aware: bool = False
    prefix: str | None = None
    candidates: tuple[str, ...] = ()
    lengths: int | None = None
    families: int = 4

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
        self._check_setup()
        check_protocols(self)

    def _check_setup(self):
        """What else can be refused before any network call or model load."""
        if self.task != "recall" and min(self.context) < 4 * self.period:
            raise ConfigError(
                "context",
                f"{min(self.context)} tokens is too short for stride period {self.period}: "
                f"a text task needs at least 4 periods ({4 * self.period} tokens)",
            )
        if self.prompt not in PROMPTS:
            raise ConfigError("prompt", f"one of {', '.join(PROMPTS)}, got {self.prompt!r}")
        if self.dtype not in DTYPES:
            raise ConfigError("dtype", f"one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", str(self.device)):
            raise ConfigError("device", f"auto, cpu, mps, cuda or cuda:N, got {self.device!r}")
        if self.bos not in ("auto", "yes", "no"):
            raise ConfigError("bos", f"one of auto, yes, no, got {self.bos!r}")
        if self.backend != "hf":
            for name, default in (("dtype", "auto"), ("device", "auto"), ("chat", False),
                                  ("system", None), ("bos", "auto")):  # fmt: skip
                if getattr(self, name) != default:
                    raise ConfigError(name, "applies to the hf backend only")
        if self.system is not None and not self.chat:
            raise ConfigError("system", "a system prompt goes in a chat template: pass --chat")
        if self.backend != "openai" and self.prompt != "auto":
            raise ConfigError("prompt", "applies to the openai backend only")
        if self.control and self.task == "recall":
            raise ConfigError("control", "the control design is for the text tasks")
        if self.task != "recall":
            spec = self.tokenizer
            if spec == "server" and self.backend != "openai":
                raise ConfigError("tokenizer", "server applies to the openai backend")
            if spec not in ("auto", "byte", "server") and not pathlib.Path(spec).expanduser().is_dir():
                raise ConfigError(
                    "tokenizer",
                    f"{spec!r} is neither 'byte', 'server', 'auto' nor a tokenizer directory",
                )
        if self.checkpoint is not None and not pathlib.Path(self.checkpoint).expanduser().is_file():
            raise ConfigError("checkpoint", f"no such file: {self.checkpoint}")
        self._check_press()
        if self.backend == "hf":
            model = pathlib.Path(str(self.model)).expanduser()
            if not (model / "config.json").is_file():
                raise ConfigError(
                    "model", f"{self.model} is not a Hugging Face model directory (no config.json)"
                )

    def _check_press(self):
        if self.question_aware and self.press is None:
            raise ConfigError("question_aware", "puts the question inside a press's context: pass --press")
        if self.press is None:
            return
        if self.backend != "hf":
            raise ConfigError("press", "applies to the hf backend only")
        if self.compress is not None:
            raise ConfigError("press", "a press and --compress are two compressions: pass one")
        if self.task not in ("passkey", "kv"):
            raise ConfigError("press", f"applies to the passkey and kv tasks (a question after the "
                                       f"context), not {self.task}")  # fmt: skip
        self.press_spec  # noqa: B018 (parsed here, so a bad SPEC is refused before any model load)

    @property
    def press_spec(self):
        """The `probe.press.PressSpec` that `press` names (None without one)."""
        if self.press is None:
            return None
        from .press import parse_press

        return parse_press(self.press)

    @property
    def model_kwargs(self) -> dict | None:
        """`from_pretrained` arguments of the hf backend: the compressed attention, if asked."""
        if self.compress is None:
            return None
        return {"attn_implementation": register(self.compression)}

    @property
    def compression(self):
        """The `compression.Compression` the compress fields name (None without `compress`)."""
        if self.compress is None:
            return None
        return Compression(self.compress, self.window, self.compress_stride, self.local_window,
                           self.seed, self.compress_weights)  # fmt: skip

    @property
    def period(self) -> int:
        """The design period S: every stride divides it."""
        return math.lcm(*(int(s) for s in self.stride))

    def replace(self, **changes) -> ProbeConfig:
        return dataclasses.replace(self, **changes)


def _rng(seed: int, context: int, depth: float | None, group: int, *more) -> np.random.Generator:
    depth_key = -1 if depth is None else round(depth * 1_000_000)
    return np.random.default_rng([seed, context, depth_key + 1, group, *more])


Piece = tuple[str, tuple[int, ...]]  # a text and its token ids


class _Pieces:
    """The task's text pieces, each encoded once, and filler of whole sentences."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self._cache: dict[str, Piece] = {}
        self.sentences = [self(s) for s in FILLER]
        self.lengths = [len(ids) for _, ids in self.sentences]
        if min(self.lengths) < 1 or math.gcd(*self.lengths) != 1:
            raise ConfigError(
                "tokenizer",
                f"{tokenizer.name} encodes the filler sentences to {self.lengths} tokens: "
                "the design needs lengths with no common divisor",
            )
        self._reach = [True]  # _reach[n]: n tokens are a sum of whole sentences
        longest, run, n = max(self.lengths), 0, 0
        while run < longest:  # past `longest` reachable lengths in a row, every length is
            n += 1
            run = run + 1 if self.reachable(n) else 0
        self.minimum = n - longest + 1

    def __call__(self, text: str) -> Piece:
        if text not in self._cache:
            self._cache[text] = (text, tuple(self.tokenizer.encode(text)))
        return self._cache[text]

    def reachable(self, n: int) -> bool:
        while len(self._reach) <= n:
            m = len(self._reach)
            self._reach.append(any(m >= x and self._reach[m - x] for x in self.lengths))
        return n >= 0 and self._reach[n]

    def exact(self, rng: np.random.Generator, n: int) -> list[Piece]:
        """Whole filler sentences of exactly `n` tokens (n reachable), drawn with `rng`."""
        out: list[Piece] = []
        while n > 0:
            options = [i for i, x in enumerate(self.lengths) if self.reachable(n - x)]
            i = options[int(rng.integers(len(options)))]
            out.append(self.sentences[i])
            n -= self.lengths[i]
        return out

    def loose(self, rng: np.random.Generator, n: int, inserts: Sequence[list[Piece]]) -> list[Piece]:
        """Whole filler sentences of at most `n` tokens in all, from a random one on, with
        `inserts` (lists of pieces) put between sentences at random boundaries."""
        room = n - sum(_length(x) for x in inserts)
        out: list[Piece] = []
        i = int(rng.integers(len(self.sentences)))
        while room - self.lengths[i % len(self.sentences)] >= 0:
            room -= self.lengths[i % len(self.sentences)]
            out.append(self.sentences[i % len(self.sentences)])
            i += int(rng.integers(1, len(self.sentences)))  # never the same one twice in a row
        cuts = sorted((int(rng.integers(len(out) + 1)) for _ in inserts), reverse=True)
        for cut, insert in zip(cuts, inserts, strict=True):
            out[cut:cut] = insert
        return out


def _length(pieces: Sequence[Piece]) -> int:
    return sum(len(ids) for _, ids in pieces)


def _digits(rng: np.random.Generator, n: int) -> str:
    return str(int(rng.integers(1, 10))) + "".join(str(d) for d in rng.integers(0, 10, n - 1))


@dataclass(frozen=True)
class _Layout:
    """A group's parts that do not move with the phases, and the lengths that place them."""

    before: list
    needle: list
    after: list
    ending: list
    question: list
    prefix: int  # tokens of the needle before the answer's first token
    head: int  # tokens of head(0): the answer's index is a multiple of S at k = 0
    total: int  # T0: the prompt's length at t = 0
    answer: str
    answer_ids: tuple[int, ...]


def text_trials(
    config: ProbeConfig,
    tokenizer: Tokenizer,
    lead: Sequence[int] = (),
    trail: Sequence[int] = (),
) -> list[Trial]:
    """Every trial of a `passkey` or `kv` scan (module docstring), in a fixed order.

    `lead`: ids the model reads before the text (a BOS token, a chat template's opening,
    one a server adds itself); `trail`: ids after the question (a chat template's closing).
    """
    if config.task == "records":
        return record_trials(config, tokenizer, lead, trail)
    pieces = _Pieces(tokenizer)
    lead, trail = tuple(lead), tuple(trail)
    check = getattr(tokenizer, "local", True)
    S, trials, block = config.period, [], 0
    for context in config.context:
        for depth in config.depth:
            for group in range(config.trials):
                rng = _rng(config.seed, context, depth, group)
                lay = _layout(config, pieces, rng, int(context), float(depth), len(lead), len(trail))
                for k in range(S):
                    t = (k + group) % S
                    hk, tk = (0, 0) if config.control else (k, t)
                    head = pieces.exact(_rng(config.seed, context, depth, group, k), lay.head + hk)
                    fixed = len(lead) + _length(lay.before) + _length(head) + _length(lay.needle)
                    fixed += _length(lay.after) + _length(lay.ending) + _length(lay.question)
                    rest = lay.total + tk - fixed - len(trail)
                    tail = pieces.exact(_rng(config.seed, context, depth, group, k, t), rest)
                    body = lay.before + head + lay.needle + lay.after + tail + lay.ending + lay.question
                    ids = tuple(i for _, piece in body for i in piece)
                    text = "".join(piece for piece, _ in body)
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
                            lead + ids + trail,
                            lay.answer,
                            lay.answer_ids,
                            len(lead) + _length(lay.before) + _length(head) + lay.prefix,
                            block,
                            len(lay.answer_ids) + (REPLY_MARGIN if trail else ANSWER_MARGIN),
                            text,
                            tuple(tokenizer.encode(text)) == ids if check else None,
                            reply=bool(trail),
                            question=_length(lay.question) + len(trail),
                        )
                    )
                block += 1
    return trials


def _layout(config, pieces: _Pieces, rng, context: int, depth: float, lead: int, trail: int):
    """One group's parts and lengths (`_Layout`); ConfigError if the context is too short."""
    S = config.period
    if config.task == "passkey":
        digits = _digits(rng, config.digits)
        parts = [pieces(p.format(digits=digits)) for p in PASSKEY]
        question = [pieces(PASSKEY_QUESTION)]
        answer, distractors = digits, []
    else:
        names = rng.choice(len(NAMES), size=config.facts, replace=False)
        values = [_digits(rng, config.digits) for _ in names]
        facts = [
            [pieces(p.format(name=NAMES[n], value=v)) for p in FACT]
            for n, v in zip(names, values, strict=True)
        ]
        parts = facts[0]  # the queried fact is the needle
        distractors = facts[1:]
        question = [pieces(FACT_QUESTION.format(name=NAMES[names[0]]))]
        answer = values[0]
    answer_ids = parts[1][1]
    # The answer's first token: its piece's own leading space, where the tokenizer makes
    # that a token of its own (bytes do; BPE joins it to the first digit), is not the answer.
    space = pieces(" ")[1]
    lead_space = len(space) if answer_ids[: len(space)] == space and len(answer_ids) > len(space) else 0
    prefix = len(parts[0][1]) + lead_space
    answer_ids = answer_ids[lead_space:]
    ending = [pieces.sentences[int(i)] for i in rng.choice(len(FILLER), ENDING_SENTENCES, replace=False)]
    M = pieces.minimum
    total = S * (context // S) - S  # the prompt's length at t = 0
    small = lead + _length(parts) + _length(ending) + _length(question) + trail
    budget = total - small - (M + S - 1) - (S - 1) - M
    if budget < sum(_length(d) for d in distractors):
        raise ConfigError(
            "context",
            f"{context} tokens is too short for the {config.task} task at stride period {S} "
            f"(the needle, question and the shifts' filler take {total - budget} tokens)",
        )
    inside = [d for d in distractors if rng.random() < depth]
    outside = [d for d in distractors if not any(d is x for x in inside)]
    target = round(depth * (budget - sum(_length(d) for d in distractors)))
    before = pieces.loose(rng, target + sum(_length(d) for d in inside), inside)
    after = pieces.loose(rng, budget - _length(before), outside)
    head = M + (-(lead + _length(before) + M + prefix)) % S
    return _Layout(
        before, parts, after, ending, question, prefix, head, total, answer, tuple(answer_ids)
    )


def recall_trials(config: ProbeConfig, lm_config) -> list[Trial]:
    """Every trial of a `recall` scan for a decoder trained with `lm_config` (an `LMConfig`).

    Per group, one trial per residue k of the design period: the first-queried value
    starts at a position uniform among those = k mod S beyond the uncompressed reach
    (the positions `sims.decoder.evaluate.phase_summary` counts), the other facts placed
    uniformly around it.
    """
    # jax (the decoder family) only for a recall design: the http probes run without it
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
