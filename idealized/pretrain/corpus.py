"""The pretraining corpus: a seeded generator of a small language with repetition.

Every row of a batch is one document, `<doc>` then sentences, cut at `length + 1` tokens.
A document has its own cast: up to `CAST` characters, each an animal (a lookup key)
bound to a personal name (a lookup value) and to a home place, an object, a trait and an
age. A character is introduced once (`the fox carol came from Tarobu .`) and referred to
again later in varied frames (`later , the fox carol went back to Tarobu .`, `who was the
fox ? it was carol .`), alone, in pairs, or in short rosters of at most three characters
(`then fox carol , owl bob and cat dave ...`, `all the friends : fox carol owl bob cat
dave .`), so a name also follows its animal where the animal follows another name, as in
the lookup's records. A document also has a song of six random words sung more than once,
sentences of random words, and pauses (runs of `-`). So next-token prediction rewards
looking up what followed a token earlier in the document (induction): a name after its
animal, a place after its name, the next word of the song.

Never shown: the lookup's format (`weakspots.sims.pretrain.lookup`), a run of one-token
keys each directly followed by a one-token value. Only pairs and rosters put pairs side by
side, at most three of them; every sentence starts with a word that is not an animal and
ends with punctuation, so no run of pairs crosses sentences. `lookup_runs` finds such runs
(the corpus test scans for them).

Batches are vectorised numpy, deterministic from `(seed, step)` (numpy's Philox counter
generator keyed by both), so a run resumed at `step` sees the same data.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator

import numpy as np

from weakspots.idealized.pretrain.tokenizer import Tokenizer

VALIDATION_SEED = 999_983  # the held-out stream: validation loss, copy accuracy, gates' text
CAST = 64  # characters at most per document (the lookup's 64 records need 64 distinct keys)
SONG = 6  # words in a document's song

# Sentence frames, by kind. `{A.x}`, `{B.x}`, `{C.x}`: attribute x of the sentence's first,
# second, third character; `{noun}` etc.: a random word of that class; `{song}`: the song.
INTRODUCTIONS = (
    "there was a {A.animal} named {A.name} who lived in {A.place} .",
    "the {A.animal} {A.name} came from {A.place} .",
    "{A.name} the {A.animal} had a {A.trait} {A.object} .",
    "a {A.animal} called {A.name} lived near the {noun} in {A.place} .",
    "once , the {A.animal} {A.name} found a {A.trait} {A.object} .",
    "the {A.animal} {A.name} was {A.age} years old and lived in {A.place} .",
)
REFERENCES = (
    "the {A.animal} {A.name} {verb} the {noun} .",
    "later , the {A.animal} {A.name} went back to {A.place} .",
    "{A.name} the {A.animal} still had the {A.trait} {A.object} .",
    "in {A.place} the {A.animal} {A.name} was {adjective} .",
    "everyone knew the {A.animal} {A.name} from {A.place} .",
    "the {A.trait} {A.object} belonged to the {A.animal} {A.name} .",
    "who was the {A.animal} ? it was {A.name} .",
    "then {A.name} turned {A.age} .",
    "one day the {A.animal} {A.name} {verb} a {adjective} {noun} .",
)
PAIRS = (
    "the {A.animal} {A.name} and the {B.animal} {B.name} {verb} together .",
    "the {A.animal} {A.name} met the {B.animal} {B.name} in {B.place} .",
    "after that {A.name} the {A.animal} saw {B.name} the {B.animal} .",
    "then {A.animal} {A.name} {B.animal} {B.name} {verb} .",
    "{A.name} met {B.animal} {B.name} near the {noun} .",
)
ROSTERS = (
    "the friends were {A.animal} {A.name} , {B.animal} {B.name} and {C.animal} {C.name} .",
    "then {A.animal} {A.name} , {B.animal} {B.name} , {C.animal} {C.name} : all of them {verb} .",
    "then {A.animal} {A.name} {B.animal} {B.name} {C.animal} {C.name} {verb} together .",
    "all the friends : {A.animal} {A.name} {B.animal} {B.name} {C.animal} {C.name} .",
)
OTHERS = (
    "the {adjective} {noun} was {adjective} .",
    "it {verb} near the {noun} in {place} .",
    "every {noun} had {number} {noun} .",
    "the {noun} of the {noun} is {adjective} and {adjective} .",
    "so they {verb} the {noun} while the {noun} {verb} .",
)
SONGS = (
    "they sang : {song} .",
    "the song goes {song} .",
    "again : {song} !",
)
PAUSES = tuple("- " * n + "." for n in (3, 5, 8, 12, 16, 24, 32, 64))
FRAMES = {
    "introduction": INTRODUCTIONS,
    "reference": REFERENCES,
    "pair": PAIRS,
    "roster": ROSTERS,
    "other": OTHERS,
    "song": SONGS,
    "pause": PAUSES,
}
# Sentence kinds as drawn (before introductions are placed): a character sentence, a pair,
# a roster, a sentence of random words, the song, a pause.
KIND_PROBABILITIES = {
    "character": 0.52,
    "pair": 0.12,
    "roster": 0.12,
    "other": 0.1,
    "song": 0.08,
    "pause": 0.06,
}
NEW_CHARACTER = (0.15, 0.6)  # a document's chance that a character sentence introduces one

ATTRIBUTES = ("animal", "name", "place", "object", "trait", "age")
RANDOM_SLOTS = ("noun", "adjective", "verb", "place", "number")
_CLASS_OF = {
    "animal": "animal",
    "name": "name",
    "place": "place",
    "object": "noun",
    "trait": "adjective",
    "age": "number",
}


def _slot_names() -> tuple[str, ...]:
    roles = tuple(f"{r}.{a}" for r in "ABC" for a in ATTRIBUTES)
    return roles + RANDOM_SLOTS + tuple(f"song{i}" for i in range(SONG))


SLOTS = _slot_names()


@functools.cache
def _frames(tokenizer: Tokenizer) -> _Frames:
    return _Frames(tokenizer)


class _Frames:
    """Every frame as a row of a padded table: word ids, or `-1 - slot` for a slot."""

    def __init__(self, tokenizer: Tokenizer):
        rows, self.kind_range = [], {}
        for kind, frames in FRAMES.items():
            start = len(rows)
            for frame in frames:
                rows.append(
                    [
                        self._code(tokenizer, word)
                        for word in frame.split()
                        for word in self._expand(word)
                    ]
                )
            self.kind_range[kind] = (start, len(rows))
        self.lengths = np.array([len(r) for r in rows], dtype=np.int64)
        self.table = np.full((len(rows), self.lengths.max()), tokenizer.pad_id, dtype=np.int64)
        for i, r in enumerate(rows):
            self.table[i, : len(r)] = r

    @staticmethod
    def _expand(word: str) -> list[str]:
        return [f"{{song{i}}}" for i in range(SONG)] if word == "{song}" else [word]

    @staticmethod
    def _code(tokenizer: Tokenizer, word: str) -> int:
        if word.startswith("{"):
            return -1 - SLOTS.index(word[1:-1])
        if word not in tokenizer.ids:
            raise ValueError(f"frame word {word!r} is not in the vocabulary")
        return tokenizer.ids[word]


def _choose(rng, starts_stops, which, shape):
    """A uniform frame index inside the range of each sentence's kind."""
    lo = np.asarray([s for s, _ in starts_stops])[which]
    hi = np.asarray([e for _, e in starts_stops])[which]
    return lo + (rng.random(shape) * (hi - lo)).astype(np.int64)


def _distinct_below(rng, count, exclude):
    """Uniform integers in `[0, count)` avoiding the sorted-or-not values of `exclude` (a list
    of arrays, each already in range and pairwise distinct); needs `count > len(exclude)`."""
    draw = (rng.random(count.shape) * (count - len(exclude))).astype(np.int64)
    for value in np.sort(np.stack(exclude), axis=0) if exclude else []:
        draw = draw + (draw >= value)
    return draw


def word_cdf(count: int, zipf: float) -> np.ndarray | None:
    """The cumulative distribution of an open class's word ranks: `P(i) ~ (i + 1)^-zipf`,
    `(count,)`; None for `zipf = 0` (uniform)."""
    if zipf == 0:
        return None
    weights = np.arange(1, count + 1, dtype=np.float64) ** -zipf
    return np.cumsum(weights) / weights.sum()


def draw_words(rng: np.random.Generator, ids: np.ndarray, size, zipf: float = 0.0) -> np.ndarray:
    """Words of one class, `ids[rank]` with the rank uniform (`zipf = 0`) or Zipfian
    (`word_cdf`); one uniform number per word either way."""
    uniform = rng.random(size)
    cdf = word_cdf(ids.size, zipf)
    if cdf is None:
        return ids[(uniform * ids.size).astype(np.int64)]
    return ids[np.minimum(np.searchsorted(cdf, uniform, side="right"), ids.size - 1)]


def document_tokens(
    tokenizer: Tokenizer, rng: np.random.Generator, rows: int, length: int, zipf: float = 0.0
):
    """`rows` documents of exactly `length` tokens each, `(rows, length)` int32.

    `zipf`: random open-class words (places, nouns, adjectives, verbs, numbers, and the
    characters' attributes of those classes) are drawn with `P(rank i) ~ (i + 1)^-zipf`
    inside their class; 0 draws them uniformly. The same random numbers either way.
    """
    frames = _frames(tokenizer)
    shortest = int(frames.lengths.min())
    sentences = math.ceil(max(length - 1, 1) / shortest)
    shape = (rows, sentences)

    kinds = list(KIND_PROBABILITIES)
    kind = rng.choice(len(kinds), size=shape, p=list(KIND_PROBABILITIES.values()))
    kind[:, 0] = kinds.index("character")
    k_char, k_pair, k_roster = (kinds.index(k) for k in ("character", "pair", "roster"))
    p_new = rng.uniform(*NEW_CHARACTER, size=(rows, 1))
    new = (kind == k_char) & (rng.random(shape) < p_new)
    new[:, 0] = True
    raw_before = np.cumsum(new, axis=1) - new
    new &= raw_before < CAST
    cast = np.minimum(raw_before, CAST)  # characters introduced before each sentence
    kind = np.where((kind == k_roster) & (cast < 3), k_pair, kind)
    kind = np.where((kind == k_pair) & (cast < 2), k_char, kind)

    first = np.where(new, raw_before, _distinct_below(rng, np.maximum(cast, 1), []))
    second = _distinct_below(rng, np.maximum(cast, 2), [first])
    third = _distinct_below(rng, np.maximum(cast, 3), [first, second])

    frame_kind = np.select(
        [new, kind == k_char, kind == k_pair, kind == k_roster],
        [0, 1, 2, 3],
        default=0,
    )
    order = ["introduction", "reference", "pair", "roster"] + kinds[3:]
    frame_kind = np.where(kind >= 3, kind + 1, frame_kind)
    frame = _choose(rng, [frames.kind_range[k] for k in order], frame_kind, shape)

    # the cast: distinct animals and distinct names per document, and their attributes
    def distinct(class_name):
        ids = tokenizer.class_ids(class_name)
        return ids[np.argsort(rng.random((rows, ids.size)), axis=1)[:, :CAST]]

    def random_of(class_name, size):
        return draw_words(rng, tokenizer.class_ids(class_name), size, zipf)

    cast_table = {
        "animal": distinct("animal"),
        "name": distinct("name"),
        **{a: random_of(_CLASS_OF[a], (rows, CAST)) for a in ("place", "object", "trait", "age")},
    }
    song = np.stack(
        [random_of(c, rows) for c in ("noun", "adjective", "noun", "verb", "noun", "noun")], axis=1
    )

    # lay the sentences end to end and cut each document at `length`
    lens = frames.lengths[frame]
    ends = 1 + np.cumsum(lens, axis=1)
    starts = ends - lens
    total = int(lens.sum())
    row_of = np.repeat(np.repeat(np.arange(rows), sentences), lens.ravel())
    sentence_of = np.repeat(np.arange(rows * sentences), lens.ravel())
    offset = np.arange(total) - np.repeat(np.cumsum(lens.ravel()) - lens.ravel(), lens.ravel())
    position = np.repeat(starts.ravel(), lens.ravel()) + offset
    keep = position < length
    row_of, sentence_of, offset, position = (
        a[keep] for a in (row_of, sentence_of, offset, position)
    )
    word = frames.table[frame.ravel()[sentence_of], offset]

    slot = np.where(word < 0, -1 - word, -1)
    characters = np.stack([first, second, third], axis=-1).reshape(rows * sentences, 3)
    filled = word.copy()
    for index, name in enumerate(SLOTS):
        where = slot == index
        if not where.any():
            continue
        r = row_of[where]
        if "." in name:
            role, attribute = name.split(".")
            who = characters[sentence_of[where], "ABC".index(role)]
            filled[where] = cast_table[attribute][r, who]
        elif name.startswith("song"):
            filled[where] = song[r, int(name[4:])]
        else:
            filled[where] = random_of(name, int(where.sum()))
    out = np.full((rows, length), tokenizer.pad_id, dtype=np.int32)
    out[:, 0] = tokenizer.doc_id
    out[row_of, position] = filled
    return out


def batches(
    tokenizer: Tokenizer,
    seed: int,
    batch: int,
    length: int,
    start_step: int = 0,
    zipf: float = 0.0,
) -> Iterator[np.ndarray]:
    """Training batches `(batch, length + 1)` int32 from step `start_step` on (inputs
    `[:, :-1]`, targets `[:, 1:]`); batch `step` depends only on `(seed, step)`."""
    step = start_step
    while True:
        yield batch_at(tokenizer, seed, step, batch, length, zipf)
        step += 1


def batch_at(
    tokenizer: Tokenizer, seed: int, step: int, batch: int, length: int, zipf: float = 0.0
) -> np.ndarray:
    """The batch of step `step`: `(batch, length + 1)` int32."""
    rng = np.random.Generator(np.random.Philox(key=[seed & 0xFFFFFFFFFFFFFFFF, step]))
    return document_tokens(tokenizer, rng, batch, length + 1, zipf)


def lookup_runs(tokens, key_ids, value_ids, *, pairs: int = 4, max_gap: int = 0) -> np.ndarray:
    """Where the lookup's format occurs: `(row, position)` of every run start of at least
    `pairs` (key, value) token pairs, each key directly followed by its value and each pair
    followed by the next after at most `max_gap` other tokens. `tokens`: `(rows, T)`."""
    tokens = np.atleast_2d(np.asarray(tokens))
    is_pair = np.isin(tokens[:, :-1], key_ids) & np.isin(tokens[:, 1:], value_ids)
    rows, width = is_pair.shape
    # chain[t]: pairs in the run starting at t, counting from the right
    chain = np.zeros((rows, width + max_gap + 2), dtype=np.int64)
    for t in range(width - 1, -1, -1):
        following = chain[:, t + 2 : t + 3 + max_gap].max(axis=1)
        chain[:, t] = np.where(is_pair[:, t], 1 + following, 0)
    return np.argwhere(chain[:, :width] >= pairs)


def describe(tokenizer: Tokenizer | None = None) -> dict:
    """The corpus as plain data, for the docs and a run's recording."""
    tokenizer = tokenizer or Tokenizer.default()
    return {
        "generator": "weakspots.idealized.pretrain.corpus",
        "vocab_size": tokenizer.vocab_size,
        "classes": {name: len(span) for name, span in tokenizer.classes.items()},
        "cast": CAST,
        "song_words": SONG,
        "kind_probabilities": KIND_PROBABILITIES,
        "new_character": NEW_CHARACTER,
        "frames": {kind: list(frames) for kind, frames in FRAMES.items()},
        "never_shown": "no run of 4 or more (animal, name) pairs, each pair adjacent, "
        "with at most one token between pairs",
    }
