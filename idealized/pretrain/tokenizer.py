"""The word-level tokenizer of the pretraining corpus (`idealized.pretrain.corpus`).

One token per word. The vocabulary is fixed by this module, in classes of contiguous ids:
special tokens, the corpus's function words and punctuation, animals (the lookup's keys),
personal names (the lookup's values), numbers, and four open classes of invented words
(places, nouns, adjectives, verbs) spelled from a fixed syllable table, so the language
has a plausible vocabulary size without shipping a word list.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Sequence

import numpy as np

SPECIALS = ("<pad>", "<unk>", "<doc>")

ANIMALS = tuple(
    """
    cat dog fox wolf bear deer moose horse zebra camel llama goat sheep cow pig boar
    rabbit hare mouse rat squirrel beaver otter badger mole hedgehog bat lion tiger
    leopard cheetah jaguar panther lynx hyena jackal coyote monkey gorilla lemur sloth
    koala panda kangaroo wombat platypus seal walrus whale dolphin shark octopus squid
    crab lobster shrimp snail slug worm ant bee wasp moth beetle spider scorpion frog
    toad newt lizard gecko iguana snake cobra python turtle tortoise crocodile eagle hawk
    falcon owl raven crow magpie parrot pigeon dove swan goose duck heron stork crane
    flamingo penguin ostrich peacock turkey chicken rooster sparrow robin finch
    """.split()
)

NAMES = tuple(
    """
    alice bob carol dave erin frank grace heidi ivan judy karl laura mallory nina oscar
    peggy quinn rupert sybil trent ursula victor wendy xavier yvonne zack adam bella
    chloe daniel emma felix george hannah isaac julia kevin lily mason nora owen paula
    ryan sarah thomas uma vera william yara zoe aaron beth colin diana ethan fiona gavin
    helen ian jessica liam megan nathan olivia peter rachel simon tina victoria walter
    abigail brian cynthia derek elena gordon harriet irene jacob kate leon maria neil
    oliver patricia roger sophie tobias valerie wesley alan bianca conrad doris edgar
    flora gustav hilda igor joanna kurt lucy marcus nadia otto priscilla rosa samuel
    theresa ulrich violet xena yusuf zelda albert bruno celia dorothy elmer frida
    gilbert hugo ingrid jasper klaus lena milo nell orla pablo rita stella tobin ada
    basil clara dmitri esther fabian greta hector iris
    """.split()
)

NUMBERS = tuple(
    """
    two three four five six seven eight nine ten eleven twelve thirteen fourteen
    fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy
    eighty ninety hundred
    """.split()
)

FUNCTION_WORDS = tuple(
    """
    . , ? : ; - ! the a an and or but of in on at to from with by near under over was were
    is are had has have who what it its they them their all everyone once later then
    there again still also named called lived came found met saw went back knew belonged
    together friends sang song goes years old turned every day night morning evening very
    not never always this that these those some many few one he she his her
    while after before when where because so yes no
    """.split()
)

# The invented words: two or three syllables, onset + vowel (+ coda), one class suffix.
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "sh", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou")
_CODAS = ("", "n", "r", "l")
OPEN_CLASSES = {"place": 300, "noun": 1200, "adjective": 500, "verb": 600}
_SUFFIX = {"place": "", "noun": "", "adjective": "y", "verb": "ed"}


def _invented_words(closed: frozenset[str]) -> dict[str, tuple[str, ...]]:
    """Each open class's words, spelled by a fixed walk through the syllable table."""
    syllables = ["".join(parts) for parts in itertools.product(_ONSETS, _VOWELS, _CODAS)]
    stems = [a + b for a, b in itertools.product(syllables, repeat=2)]
    # a fixed stride through the stems (coprime with their count) mixes the spellings
    stride = 7919
    assert np.gcd(stride, len(stems)) == 1
    seen = set(closed)
    words: dict[str, list[str]] = {name: [] for name in OPEN_CLASSES}
    index = 0
    for name, count in OPEN_CLASSES.items():
        while len(words[name]) < count:
            stem = stems[(index * stride) % len(stems)]
            index += 1
            word = stem.capitalize() if name == "place" else stem + _SUFFIX[name]
            if word not in seen:
                seen.add(word)
                words[name].append(word)
    return {name: tuple(ws) for name, ws in words.items()}


class Tokenizer:
    """Word-level tokenizer: `encode` splits on whitespace; unknown words map to `<unk>`.

    `classes[name]` is the `range` of ids of one word class (`special`, `function`,
    `animal`, `name`, `number`, `place`, `noun`, `adjective`, `verb`). `key_ids` (the
    animals) and `value_ids` (the names) are the lookup's one-token keys and values.
    """

    def __init__(self, classes: dict[str, Sequence[str]]):
        words: list[str] = []
        self.classes: dict[str, range] = {}
        for name, members in classes.items():
            self.classes[name] = range(len(words), len(words) + len(members))
            words.extend(members)
        if len(set(words)) != len(words):
            raise ValueError("a word appears in two classes or twice in one")
        self.words = tuple(words)
        self.ids = {word: i for i, word in enumerate(words)}
        self.unk_id = self.ids["<unk>"]
        self.pad_id = self.ids["<pad>"]
        self.doc_id = self.ids["<doc>"]

    @staticmethod
    def default() -> Tokenizer:
        """The corpus's tokenizer (the same vocabulary on every machine)."""
        return Tokenizer.sized(0)

    @staticmethod
    @functools.cache
    def sized(open_words: int = 0) -> Tokenizer:
        """The corpus's tokenizer with at most `open_words` words in each open class (0: all
        of `OPEN_CLASSES`): the first words of the default's classes, so every id below the
        open classes (specials, function words, animals, names, numbers) is the default's."""
        if open_words < 0:
            raise ValueError(f"--open-words: must be >= 0, got {open_words}")
        closed = {"special": SPECIALS, "function": FUNCTION_WORDS, "animal": ANIMALS}
        closed |= {"name": NAMES, "number": NUMBERS}
        closed_words = frozenset(w for ws in closed.values() for w in ws)
        invented = _invented_words(closed_words)
        if open_words:
            invented = {name: words[:open_words] for name, words in invented.items()}
        return Tokenizer(closed | invented)

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    @property
    def key_ids(self) -> np.ndarray:
        """The lookup's keys: every animal, one token each."""
        return np.arange(self.classes["animal"].start, self.classes["animal"].stop, dtype=np.int32)

    @property
    def value_ids(self) -> np.ndarray:
        """The lookup's values: every personal name, one token each."""
        return np.arange(self.classes["name"].start, self.classes["name"].stop, dtype=np.int32)

    def class_ids(self, name: str) -> np.ndarray:
        span = self.classes[name]
        return np.arange(span.start, span.stop, dtype=np.int32)

    def encode(self, text: str) -> list[int]:
        return [self.ids.get(word, self.unk_id) for word in text.split()]

    def decode(self, ids: Iterable[int]) -> str:
        return " ".join(self.words[int(i)] for i in ids)
