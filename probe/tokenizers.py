"""Tokenizers a probe builds its prompts with: every prompt is a list of token ids.

`ByteTokenizer` (id = byte value), `HFTokenizer` (a Hugging Face tokenizer directory,
through `transformers`), `ServerTokenizer` (a server's tokenize endpoint, in vLLM's,
llama.cpp's or llama-cpp-python's dialect). Prompts are concatenations of separately encoded pieces, so no text is ever
decoded and encoded again and every offset is known exactly.
"""

from __future__ import annotations

import abc
import functools
import json
import pathlib
import urllib.request

from weakspots.errors import UsageError


class Tokenizer(abc.ABC):
    """Text to token ids (`encode`) and generated ids back to text (`decode`)."""

    name: str
    local = True  # encodes here (a server's tokenizer asks over the network)

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]: ...

    @abc.abstractmethod
    def decode(self, ids: list[int]) -> str: ...

    @property
    def vocab_size(self) -> int | None:
        """Ids this tokenizer can produce (all below it), or None when unknown."""
        return None


class ByteTokenizer(Tokenizer):
    """UTF-8 bytes: token id = byte value, 0-255."""

    name = "byte"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    @property
    def vocab_size(self) -> int:
        return 256


class HFTokenizer(Tokenizer):
    """A Hugging Face tokenizer loaded from a directory (`transformers.AutoTokenizer`)."""

    def __init__(self, path: str | pathlib.Path):
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise UsageError(
                "--tokenizer: a tokenizer directory needs transformers (pip install weakspots[hf])"
            ) from None
        self.name = str(path)
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(str(path))
        except (OSError, ValueError) as error:
            raise UsageError(f"--tokenizer: cannot load a tokenizer from {path}: {error}") from None

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True)

    @property
    def vocab_size(self) -> int:
        return len(self._tokenizer)

    @property
    def bos_id(self) -> int | None:
        return self._tokenizer.bos_token_id

    @property
    def adds_bos(self) -> bool:
        """Whether the tokenizer puts its BOS token before a text (its own setting)."""
        bos = self.bos_id
        return bos is not None and self._tokenizer.encode("a")[:1] == [bos]

    def chat(self, system: str | None) -> tuple[list[int], list[int]]:
        """The ids of the chat template before and after one user message (the assistant's
        turn opened); ValueError where the tokenizer has no chat template."""
        mark = "\x00PROBE\x00"
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": mark}
        ]
        text = self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        before, after = text.split(mark)
        return (
            list(self._tokenizer.encode(before, add_special_tokens=False)),
            list(self._tokenizer.encode(after, add_special_tokens=False)),
        )


class ServerTokenizer(Tokenizer):
    """A server's tokenize endpoint: `{"tokens": [...]}` for a text, in one of its dialects.

    `dialect` is the request's text field: `prompt` (vLLM, SGLang `/tokenize`), `content`
    (llama.cpp's `llama-server` `/tokenize`), `input` (llama-cpp-python's
    `/extras/tokenize`). `lead`: the ids the server puts before every text (a BOS token
    where its tokenizer adds one, as llama-cpp-python's does), stripped from `encode`.
    """

    local = False

    def __init__(
        self,
        endpoint: str,
        model: str | None,
        headers: dict[str, str],
        timeout: float,
        dialect: str = "prompt",
        lead: tuple[int, ...] = (),
    ):
        self.name = "server"
        self.endpoint, self.model, self.headers, self.timeout = endpoint, model, headers, timeout
        self.dialect, self.lead = dialect, tuple(lead)

    @functools.lru_cache(maxsize=4096)  # noqa: B019  (a tokenizer lives as long as its probe)
    def _encode(self, text: str) -> tuple[int, ...]:
        return tuple(
            tokenize_on_server(self.endpoint, self.model, text, self.headers, self.timeout, self.dialect)
        )

    def tokenize(self, text: str) -> list[int]:
        """The ids the server's completions read for `text`: its special tokens (a BOS) added
        where it adds them to a text prompt."""
        return tokenize_on_server(
            self.endpoint, self.model, text, self.headers, self.timeout, self.dialect, special=True
        )

    def encode(self, text: str) -> list[int]:
        ids = self._encode(text)
        if self.lead and ids[: len(self.lead)] == self.lead:
            ids = ids[len(self.lead) :]
        return list(ids)

    def decode(self, ids: list[int]) -> str:
        raise NotImplementedError("the server returns its continuations as text")


DIALECTS = ("prompt", "content", "input")


def tokenize_on_server(
    endpoint: str,
    model: str | None,
    text: str,
    headers: dict[str, str],
    timeout: float,
    dialect: str = "prompt",
    special: bool = False,
) -> list[int]:
    """Token ids of `text` from a tokenize endpoint, the text in field `dialect`, special
    tokens added or not (`special`) where the server takes that option (llama-cpp-python's
    `/extras/tokenize` always adds them)."""
    body: dict = {dialect: text}
    if dialect == "prompt":
        body["add_special_tokens"] = special
    elif dialect == "content":
        body["add_special"] = special
    if model:
        body["model"] = model
    request = urllib.request.Request(
        endpoint,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        tokens = json.loads(response.read())["tokens"]
    return [int(t["id"]) if isinstance(t, dict) else int(t) for t in tokens]


def load_tokenizer(spec: str) -> Tokenizer:
    """`byte` or a Hugging Face tokenizer directory (the server's is made by its backend)."""
    if spec == "byte":
        return ByteTokenizer()
    path = pathlib.Path(spec).expanduser()
    if not path.is_dir():
        raise UsageError(
            f"--tokenizer: {spec!r} is neither 'byte', 'server', 'auto' nor a tokenizer directory"
        )
    return HFTokenizer(path)
