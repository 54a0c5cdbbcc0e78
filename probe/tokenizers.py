"""Tokenizers a probe builds its prompts with: every prompt is a list of token ids.

`ByteTokenizer` (id = byte value), `HFTokenizer` (a Hugging Face tokenizer directory,
through `transformers`), `ServerTokenizer` (an OpenAI-compatible server's `/tokenize`
endpoint). Prompts are concatenations of separately encoded pieces, so no text is ever
decoded and encoded again and every offset is known exactly.
"""

from __future__ import annotations

import abc
import functools
import json
import pathlib
import urllib.request

from weakspots.sims.cli.common import UsageError


class Tokenizer(abc.ABC):
    """Text to token ids (`encode`) and generated ids back to text (`decode`)."""

    name: str

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


class ServerTokenizer(Tokenizer):
    """The `/tokenize` endpoint of a server (vLLM, SGLang): `{"tokens": [...]}` for a prompt."""

    def __init__(self, endpoint: str, model: str | None, headers: dict[str, str], timeout: float):
        self.name = "server"
        self.endpoint, self.model, self.headers, self.timeout = endpoint, model, headers, timeout

    @functools.lru_cache(maxsize=4096)  # noqa: B019  (a tokenizer lives as long as its probe)
    def _encode(self, text: str) -> tuple[int, ...]:
        return tuple(tokenize_on_server(self.endpoint, self.model, text, self.headers, self.timeout))

    def encode(self, text: str) -> list[int]:
        return list(self._encode(text))

    def decode(self, ids: list[int]) -> str:
        raise NotImplementedError("the server returns its continuations as text")


def tokenize_on_server(
    endpoint: str, model: str | None, text: str, headers: dict[str, str], timeout: float
) -> list[int]:
    """Token ids of `text` from a `/tokenize` endpoint (no special tokens added)."""
    body = {"prompt": text, "add_special_tokens": False}
    if model:
        body["model"] = model
    request = urllib.request.Request(
        endpoint,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return [int(t) for t in json.loads(response.read())["tokens"]]


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
