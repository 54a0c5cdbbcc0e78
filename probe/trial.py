"""`Trial`: one prompt of a scan, what every task's design (`probe.design`, `probe.records`) builds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Trial:
    """One prompt of a scan and what a correct continuation starts with.

    `coordinates`: where it sits in the design (context, depth, group, needle_shift,
    tail_shift), scalars. `prompt`: every token id the model reads (lead included).
    `needle_index`: index in `prompt` of the answer's first token (its first
    occurrence). `block`: the paired group across the whole scan (trials of one block
    share filler and answer). `answer_ids`: the answer's tokens, for backends that
    return ids. `text`: the prompt's text without its lead and trail (text tasks), what a
    server that takes text is sent. `natural`: whether the tokenizer encodes `text` to
    exactly these ids (None where not checked: a server's tokenizer, the recall task).
    `reply`: the prompt ends in a chat template's assistant turn, so the answer comes in
    a reply of the model's own wording rather than right after the question.
    `question`: how many ids at the prompt's end are the question and what follows it (a
    chat template's closing), where a press's compressed context ends (0: not known).
    """

    coordinates: dict
    prompt: tuple[int, ...]
    answer: str
    answer_ids: tuple[int, ...]
    needle_index: int
    block: int
    max_tokens: int
    text: str | None = None
    natural: bool | None = None
    reply: bool = False
    question: int = 0

    @property
    def prompt_length(self) -> int:
        return len(self.prompt)
