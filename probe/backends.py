"""Who answers a probe: an OpenAI-compatible server, a local Hugging Face model, or a decoder
trained by this project. Each backend checks itself before any trial (`check`), says what
the model reads around the prompt's text (`framing`: a BOS token, a chat template), and
answers prompts of token ids greedily (`complete`, `complete_many` for a batch).

Errors: `Refused` (a `UsageError`: bad setup found before any trial: one line, exit 2),
`TransientError` (worth retrying: HTTP 429 and 5xx, timeouts, dropped connections),
`RequestError` (not worth retrying: the server rejected this request).
"""

from __future__ import annotations

import abc
import functools
import http.client
import inspect
import json
import math
import os
import pathlib
import re
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass

from weakspots.errors import UsageError

from .tokenizers import (
    DIALECTS,
    ByteTokenizer,
    HFTokenizer,
    ServerTokenizer,
    Tokenizer,
    load_tokenizer,
    tokenize_on_server,
)

API_KEY_ENV = ("WEAKSPOTS_API_KEY", "OPENAI_API_KEY")
CHECK_TEXT = "The pass key is 12345. What is the pass key?"
CHECK_TIMEOUT = 10.0


class Refused(UsageError):
    """The backend cannot run this probe (unreachable, unknown model, wrong tokenizer)."""


class TransientError(Exception):
    """A failed request worth retrying; `retry_after` in seconds when the server said."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class RequestError(Exception):
    """A request the server rejected; retrying would not help."""


@dataclass(frozen=True)
class Completion:
    """A greedy continuation: its text, its token ids where known, their log-probabilities."""

    text: str
    token_ids: tuple[int, ...] | None = None
    token_logprobs: tuple[float, ...] | None = None


class Backend(abc.ABC):
    """One model answering prompts; `identity` names it in every stored trial's key."""

    name: str
    model_id: str

    @abc.abstractmethod
    def tokenizer(self, spec: str) -> Tokenizer:
        """The tokenizer `spec` names (`auto`: the model's own) for this backend."""

    @abc.abstractmethod
    def check(self, tokenizer: Tokenizer | None) -> None:
        """Raise `Refused` if the model cannot be probed with `tokenizer` (None: prompts in
        the model's own ids, as the recall task builds them)."""

    @abc.abstractmethod
    def complete(self, prompt: tuple[int, ...], max_tokens: int, text: str | None = None) -> Completion:
        """The greedy continuation of `prompt` (token ids, the lead included; `text`: the
        prompt's text without its lead, for servers that take text), at most `max_tokens`."""

    batch_size = 1  # prompts `complete_many` answers at once

    def complete_many(self, prompts, max_tokens, texts=None) -> list[Completion]:
        """`complete` for each prompt (a backend that batches does better)."""
        texts = texts or [None] * len(prompts)
        return [self.complete(p, m, t) for p, m, t in zip(prompts, max_tokens, texts, strict=True)]

    def complete_trials(self, trials) -> list[Completion]:
        """The greedy continuations of `trials` (`probe.trial.Trial`): `complete_many` on
        their prompts (a backend that needs more of a trial, such as where its question
        starts, reads it here)."""
        return self.complete_many(
            [t.prompt for t in trials], [t.max_tokens for t in trials], [t.text for t in trials]
        )

    def framing(self, tokenizer: Tokenizer) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Ids the model reads before the prompt's text and after it (none by default)."""
        del tokenizer
        return (), ()

    @property
    def identity(self) -> dict:
        return {"backend": self.name, "model": self.model_id}

    def close(self) -> None:  # noqa: B027 (optional: most backends hold nothing)
        """Release what the backend holds (nothing by default)."""


# ----------------------------------------------------------------------------- openai


def api_key() -> str | None:
    """The API key from `$WEAKSPOTS_API_KEY` or `$OPENAI_API_KEY` (None when neither is set)."""
    for name in API_KEY_ENV:
        if os.environ.get(name):
            return os.environ[name]
    return None


class OpenAIBackend(Backend):
    """An OpenAI-compatible server: `POST {url}/completions`, greedy (`temperature 0`), one
    log-probability per token (`logprobs 1`).

    `url` is the API base (`http://host:8000/v1`). The prompt goes as token ids
    (`prompt="ids"`: vLLM, SGLang, llama.cpp's `llama-server`) or as text (`"text"`:
    llama-cpp-python's server, which takes no ids): each text is first tokenized by the
    server and must give the trial's ids exactly, or the trial is refused, not scored.
    `"auto"`: text where the server's tokenizer speaks llama-cpp-python's dialect, ids
    elsewhere. `ids=True` also asks for the tokens as ids (vLLM's
    `return_tokens_as_token_ids`), for tasks scored on ids.
    """

    name = "openai"

    def __init__(self, url: str, model: str, timeout: float, *, ids: bool = False, prompt: str = "auto"):
        if not str(url).startswith(("http://", "https://")):
            raise Refused(f"--url: an http:// or https:// API base, got {url!r}")
        self.url = url.rstrip("/")
        self.model_id = model
        self.timeout = timeout
        self.ids = ids
        self.prompt = prompt
        key = api_key()
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._server: ServerTokenizer | None = None
        self._probed = False

    def _request(self, path_or_url: str, body: dict | None, timeout: float):
        url = path_or_url if "://" in path_or_url else self.url + path_or_url
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            url,
            data=data,
            headers={"Content-Type": "application/json", **self.headers},
            method="GET" if body is None else "POST",
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def server_tokenizer(self) -> ServerTokenizer | None:
        """The server's tokenize endpoint in the first dialect that answers a non-empty text
        with tokens (an empty list is no endpoint): vLLM's and SGLang's `/tokenize`
        (`prompt`), llama-server's `/tokenize` (`content`), llama-cpp-python's
        `/extras/tokenize` (`input`); beside the API base or at the server's root."""
        if not self._probed:
            self._probed = True
            root = self.url[: -len("/v1")] if self.url.endswith("/v1") else self.url
            paths = dict.fromkeys(
                [self.url + "/tokenize", root + "/tokenize", root + "/extras/tokenize"]
            )
            for endpoint in paths:
                for dialect in DIALECTS:
                    try:
                        ids = tokenize_on_server(
                            endpoint, self.model_id, "a", self.headers, CHECK_TIMEOUT, dialect
                        )
                    except (urllib.error.HTTPError, ValueError, KeyError, TypeError):
                        continue
                    except (urllib.error.URLError, OSError):
                        return None
                    if not ids:
                        continue
                    tokenizer = ServerTokenizer(endpoint, self.model_id, self.headers, self.timeout, dialect)
                    try:  # what the server puts before every text (a BOS token, or nothing)
                        tokenizer.lead = tuple(tokenizer.tokenize(""))
                    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
                        pass
                    self._server = tokenizer
                    return tokenizer
        return self._server

    def tokenize_endpoint(self) -> str | None:
        """The URL of the server's tokenize endpoint, if any."""
        server = self.server_tokenizer()
        return None if server is None else server.endpoint

    @property
    def text_prompts(self) -> bool:
        """Whether prompts go as text (resolved once the server's tokenizer is known)."""
        if self.prompt == "auto":
            server = self.server_tokenizer()
            return server is not None and server.dialect == "input"
        return self.prompt == "text"

    def tokenizer(self, spec: str) -> Tokenizer:
        if spec in ("auto", "server"):
            self._reachable()
            server = self.server_tokenizer()
            if server is None:
                raise Refused(
                    f"--tokenizer: the server at {self.url} has no tokenize endpoint that "
                    "answers; pass --tokenizer byte or the model's tokenizer directory"
                )
            return server
        return load_tokenizer(spec)

    def framing(self, tokenizer: Tokenizer) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """In text mode, the ids the server's tokenizer puts before every text."""
        del tokenizer
        if self.text_prompts and self._server is not None:
            return self._server.lead, ()
        return (), ()

    def _reachable(self) -> None:
        try:
            listing = self._request("/models", None, CHECK_TIMEOUT)
        except urllib.error.HTTPError as error:
            if error.code in (401, 403):
                raise Refused(
                    f"--url: the server at {self.url} refused the API key (HTTP {error.code}); "
                    f"set {' or '.join(API_KEY_ENV)}"
                ) from None
            return  # no model listing here: the completions decide
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            raise Refused(f"--url: cannot reach the server at {self.url}: {reason}") from None
        models = [m.get("id") for m in listing.get("data", []) if isinstance(m, dict)]
        if models and self.model_id not in models:
            raise Refused(
                f"--model: the server at {self.url} serves {', '.join(map(str, models))}, "
                f"not {self.model_id!r}"
            )

    def check(self, tokenizer: Tokenizer | None) -> None:
        self._reachable()
        server = self.server_tokenizer()
        if self.text_prompts and server is None:
            raise Refused(
                f"--prompt: text prompts are checked through the server's tokenizer, and the "
                f"server at {self.url} has no tokenize endpoint"
            )
        if self.text_prompts and tokenizer is None:
            raise Refused("--prompt: the recall task is built in ids; pass --prompt ids")
        if tokenizer is None or isinstance(tokenizer, ServerTokenizer) or server is None:
            return  # nothing to compare against: the user's tokenizer is taken as given
        ours = tokenizer.encode(CHECK_TEXT)
        try:
            theirs = server.encode(CHECK_TEXT)
        except (urllib.error.URLError, OSError, ValueError, KeyError):
            return
        if ours != theirs:
            raise Refused(
                f"--tokenizer: {tokenizer.name} does not match the model's vocabulary: "
                f"{CHECK_TEXT[:15]!r}... is {_head(ours)} here but {_head(theirs)} on the server"
            )

    def _post(self, path: str, body: dict, timeout: float):
        """A request whose failures are sorted: retried (`TransientError`) or not."""
        try:
            return self._request(path, body, timeout)
        except urllib.error.HTTPError as error:
            detail = _excerpt(error)
            if error.code in (429, 408) or (error.code >= 500 and not _invalid(detail)):
                raise TransientError(
                    f"HTTP {error.code}: {detail}", _retry_after(error.headers)
                ) from None
            raise RequestError(f"HTTP {error.code}: {detail}") from None
        except (
            urllib.error.URLError,
            http.client.HTTPException,
            ConnectionError,
            TimeoutError,
        ) as error:
            raise TransientError(f"{type(error).__name__}: {getattr(error, 'reason', error)}") from None
        except ValueError as error:  # a truncated or garbled body
            raise TransientError(f"unreadable reply: {error}") from None

    def complete(self, prompt: tuple[int, ...], max_tokens: int, text: str | None = None) -> Completion:
        body = {"model": self.model_id, "max_tokens": max_tokens, "temperature": 0, "logprobs": 1}
        if self.text_prompts:
            server = self._server
            if text is None or server is None:
                raise RequestError("a text prompt needs the trial's text and the server's tokenizer")
            try:
                theirs = tuple(server.tokenize(text))
            except urllib.error.HTTPError as error:
                raise TransientError(f"tokenize: HTTP {error.code}: {_excerpt(error)}") from None
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as error:
                raise TransientError(f"tokenize: {type(error).__name__}: {error}") from None
            if theirs != tuple(prompt):
                at = next((i for i, (a, b) in enumerate(zip(theirs, prompt, strict=False)) if a != b), None)
                at = min(len(theirs), len(prompt)) if at is None else at
                raise RequestError(
                    f"round trip: the server tokenizes the text to {len(theirs)} ids, not the "
                    f"prompt's {len(prompt)} (first difference at {at})"
                )
            body["prompt"] = text
        else:
            body["prompt"] = list(prompt)
        if self.ids:
            body["return_tokens_as_token_ids"] = True
        reply = self._post("/completions", body, self.timeout)
        try:
            choice = reply["choices"][0]
            completion = choice.get("text") or ""
        except (KeyError, IndexError, TypeError):
            raise RequestError(f"no completion in the reply: {str(reply)[:200]}") from None
        ids, values = _logprobs(choice.get("logprobs"))
        return Completion(completion, ids, values)


def _logprobs(logprobs) -> tuple[tuple[int, ...] | None, tuple[float, ...] | None]:
    """Token ids (where the reply has them) and log-probabilities, in either format: the
    completions API's `tokens` / `token_logprobs`, or `content[].logprob` (with `id`), as
    llama.cpp's server and the chat API give them."""
    if not isinstance(logprobs, dict):
        return None, None
    ids, values = None, None
    content = logprobs.get("content")
    if isinstance(content, list) and content and all(isinstance(c, dict) for c in content):
        if all(isinstance(c.get("logprob"), int | float) for c in content):
            values = tuple(float(c["logprob"]) for c in content)
        if all(isinstance(c.get("id"), int) for c in content):
            ids = tuple(int(c["id"]) for c in content)
        return ids, values
    tokens, token_logprobs = logprobs.get("tokens"), logprobs.get("token_logprobs")
    if tokens and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        ids = tuple(int(t.split(":", 1)[1]) for t in tokens)
    if token_logprobs and all(isinstance(v, int | float) for v in token_logprobs):
        values = tuple(float(v) for v in token_logprobs)
    return ids, values


_INVALID = re.compile(r"valid|should be|unprocessable|not supported|unsupported|schema", re.I)


def _invalid(detail: str) -> bool:
    """Whether an HTTP 5xx body says the request itself is malformed (a validation error,
    as llama-cpp-python's server answers token ids with): retrying cannot help."""
    return bool(_INVALID.search(detail))


def _head(ids: list[int], n: int = 6) -> str:
    return "[" + ", ".join(map(str, ids[:n])) + (", ...]" if len(ids) > n else "]")


def _excerpt(error: urllib.error.HTTPError) -> str:
    try:
        body = error.read().decode("utf-8", errors="replace")
    except OSError:
        body = ""
    return " ".join((body or str(error.reason)).split())[:200]


def _retry_after(headers) -> float | None:
    try:
        value = float(headers.get("Retry-After"))
    except (TypeError, ValueError, AttributeError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


# ----------------------------------------------------------------------------- hf


class HFBackend(Backend):
    """A local Hugging Face causal LM directory (`transformers`, `torch`), greedy decoding.

    `dtype` (`auto`: float32 on a CPU, the checkpoint's own elsewhere), `device` (`auto`:
    CUDA where there is one). `batch`: prompts decoded together (`complete_many`); their
    longest common prefix is run once and its cache shared, the rest left-padded with the
    pads masked and every token given its own position id, so no token moves. `bos`
    (`auto`: as the tokenizer does) and `chat`/`system` (the tokenizer's chat template
    around the prompt) are what `framing` adds around the text. `model_kwargs` go to
    `from_pretrained` as they are (for instance `attn_implementation`, an attention
    function registered with transformers). `press` (a `probe.press.PressSpec`): the
    context (the prompt before its question; with `question_aware`, all but the prompt's
    last token) is prefilled under the press, one prompt at a time, and the rest of the
    prompt and the answer are decoded after it, uncompressed (`probe.press.prefill`).
    """

    name = "hf"
    SHARED_MIN = 16  # a common prefix shorter than this is not worth a cache of its own

    def __init__(
        self,
        path: str,
        *,
        dtype: str = "auto",
        device: str = "auto",
        batch: int = 1,
        bos: str = "auto",
        chat: bool = False,
        system: str | None = None,
        model_kwargs: dict | None = None,
        press=None,
        question_aware: bool = False,
    ):
        try:
            import torch
            from transformers import AutoModelForCausalLM
        except ImportError:
            raise UsageError(
                "--backend: hf needs torch and transformers (pip install weakspots[hf])"
            ) from None
        self.path = pathlib.Path(path).expanduser()
        if not (self.path / "config.json").is_file():
            raise Refused(f"--model: {path} is not a Hugging Face model directory (no config.json)")
        self.model_id = str(self.path.resolve())
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        elif device.startswith("cuda") and not torch.cuda.is_available():
            raise Refused(f"--device: {device} asked, but torch sees no CUDA device")
        if dtype == "auto":
            dtype = "float32" if device == "cpu" else "auto"
        self.device, self.batch_size = device, int(batch)
        self.bos, self.chat, self.system = bos, chat, system
        self.press, self.question_aware = press, bool(question_aware)
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # the probe's own bar is the one progress report
        try:
            kwargs = {"dtype": dtype if dtype == "auto" else getattr(torch, dtype)}
            self.model = AutoModelForCausalLM.from_pretrained(
                str(self.path), **kwargs, **(model_kwargs or {})
            )
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        self.model.to(device).eval()
        self.dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")
        self._lock = threading.Lock()
        self._tokenizer: Tokenizer | None = None
        config = self.model.config
        eos = getattr(self.model.generation_config, "eos_token_id", None) or config.eos_token_id
        self._eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        self._pad = config.pad_token_id if config.pad_token_id is not None else 0

    @property
    def identity(self) -> dict:
        identity = {"backend": self.name, "model": self.model_id, "dtype": self.dtype}
        if self.press is not None:
            identity.update(self.press.identity, question_aware=self.question_aware)
        return identity

    def tokenizer(self, spec: str) -> Tokenizer:
        if spec == "auto":
            if not any((self.path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
                raise Refused(
                    f"--tokenizer: {self.path} holds no tokenizer; pass --tokenizer byte or a "
                    "tokenizer directory"
                )
            spec = str(self.path)
        if spec == "server":
            raise Refused("--tokenizer: server applies to the openai backend")
        self._tokenizer = load_tokenizer(spec)
        return self._tokenizer

    def framing(self, tokenizer: Tokenizer) -> tuple[tuple[int, ...], tuple[int, ...]]:
        self._tokenizer = tokenizer
        return hf_framing(tokenizer, self.bos, self.chat, self.system)

    def check(self, tokenizer: Tokenizer | None) -> None:
        if tokenizer is None:
            return
        vocab = int(self.model.config.vocab_size)
        size = tokenizer.vocab_size
        if size is None or size > vocab:
            raise Refused(
                f"--tokenizer: {tokenizer.name} does not match the model's vocabulary: it "
                f"makes ids up to {size - 1 if size else '?'}, the model has {vocab} tokens"
            )

    def complete(self, prompt: tuple[int, ...], max_tokens: int, text: str | None = None) -> Completion:
        return self.complete_many([prompt], [max_tokens])[0]

    def complete_trials(self, trials) -> list[Completion]:
        if self.press is None:
            return super().complete_trials(trials)
        completions = []
        for trial in trials:
            if trial.question < 1:
                raise RequestError("a press needs to know where the prompt's question starts")
            split = len(trial.prompt) - (1 if self.question_aware else trial.question)
            completions.append(self._pressed(trial.prompt, split, trial.max_tokens))
        return completions

    def _pressed(self, prompt: tuple[int, ...], split: int, steps: int) -> Completion:
        """Greedy decoding after `prompt[:split]` was prefilled under the press (class docstring)."""
        import torch

        from .press import prefill

        device = self.device
        with self._lock, torch.inference_mode():
            cache = prefill(self.model, self.press.press, torch.tensor([list(prompt[:split])], device=device))
            # A press may leave layers of different lengths (ChunkKV keeps the incomplete last
            # chunk in some layers only), and transformers builds one mask for every layer from
            # the first one's length; one token at a time needs no mask.
            lengths = {layer.keys.shape[2] for layer in cache.layers}
            step = len(prompt) - split if len(lengths) == 1 else 1
            out = None
            for start in range(split, len(prompt), step):
                end = min(start + step, len(prompt))
                out = self._forward(
                    input_ids=torch.tensor([list(prompt[start:end])], device=device),
                    position_ids=torch.arange(start, end, device=device)[None],
                    cache=cache if out is None else self._cache_of(out),
                )
            positions = torch.tensor([[len(prompt) - 1]], device=device)
            tokens, values = [], []
            for step in range(steps):
                logp = torch.log_softmax(out.logits[0, -1].float(), -1)
                token = int(logp.argmax())
                tokens.append(token)
                values.append(float(logp[token]))
                if token in self._eos or step == steps - 1:
                    break
                positions = positions[:, -1:] + 1
                out = self._forward(
                    input_ids=torch.tensor([[token]], device=device), position_ids=positions,
                    cache=self._cache_of(out),
                )  # fmt: skip
        tokenizer = self._tokenizer or ByteTokenizer()
        return Completion(tokenizer.decode(tokens), tuple(tokens), tuple(values))

    def complete_many(self, prompts, max_tokens, texts=None) -> list[Completion]:
        """Greedy continuations of `prompts` decoded as one batch (class docstring)."""
        import torch

        del texts
        n, steps = len(prompts), max(max_tokens)
        shared = _common_prefix(prompts) if n > 1 else 0
        shared = min(shared, min(len(p) for p in prompts) - 1)
        device = self.device
        with self._lock, torch.inference_mode():
            cache, offset = None, 0
            if shared >= self.SHARED_MIN:
                head = torch.tensor([list(prompts[0][:shared])], device=device)
                cache = self._cache_of(self._forward(input_ids=head))
                cache.batch_repeat_interleave(n)
                offset = shared
            rest = [list(p[offset:]) for p in prompts]
            width = max(len(r) for r in rest)
            ids = torch.full((n, width), self._pad, dtype=torch.long)
            mask = torch.zeros((n, offset + width), dtype=torch.long)
            mask[:, :offset] = 1
            for i, r in enumerate(rest):
                ids[i, width - len(r) :] = torch.tensor(r)
                mask[i, offset + width - len(r) :] = 1
            positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, offset:]
            ids, mask, positions = ids.to(device), mask.to(device), positions.to(device)
            out = self._forward(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache)
            new = torch.zeros((n, steps), dtype=torch.long)
            values = torch.zeros((n, steps))
            for step in range(steps):
                logp = torch.log_softmax(out.logits[:, -1].float(), -1)
                token = logp.argmax(-1)
                new[:, step] = token.cpu()
                values[:, step] = logp.gather(-1, token[:, None])[:, 0].cpu()
                if step == steps - 1:
                    break
                mask = torch.cat([mask, mask.new_ones((n, 1))], dim=1)
                positions = positions[:, -1:] + 1
                out = self._forward(
                    input_ids=token[:, None], attention_mask=mask, position_ids=positions,
                    cache=self._cache_of(out),
                )  # fmt: skip
        tokenizer = self._tokenizer or ByteTokenizer()
        completions = []
        for i, m in enumerate(max_tokens):
            tokens = new[i, :m].tolist()
            end = next((j + 1 for j, t in enumerate(tokens) if t in self._eos), len(tokens))
            tokens, logprobs = tokens[:end], values[i, :end].tolist()
            completions.append(Completion(tokenizer.decode(tokens), tuple(tokens), tuple(logprobs)))
        return completions


    def _forward(self, *, cache=None, **inputs):
        """One forward pass keeping its cache and only the last position's logits (the cache
        argument is `cache` in recent transformers, `past_key_values` before)."""
        params = self._params
        if cache is not None:
            inputs["cache" if "cache" in params else "past_key_values"] = cache
        if "logits_to_keep" in params:
            inputs["logits_to_keep"] = 1
        return self.model(**inputs, use_cache=True)

    @functools.cached_property
    def _params(self) -> set[str]:
        return set(inspect.signature(self.model.forward).parameters)

    @staticmethod
    def _cache_of(out):
        cache = getattr(out, "cache", None)
        return cache if cache is not None else out.past_key_values


def gguf_to_hf(gguf: str | pathlib.Path, out: str | pathlib.Path) -> pathlib.Path:
    """A Hugging Face model directory at `out` made from a GGUF file (transformers reads
    GGUF and de-quantises it; needs `gguf` and `accelerate`), tokenizer included. The
    de-quantised model is saved in float32 without the GGUF quantiser, which
    `save_pretrained` would refuse."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf, out = pathlib.Path(gguf).expanduser(), pathlib.Path(out).expanduser()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _common_prefix(prompts) -> int:
    first, n = prompts[0], min(len(p) for p in prompts)
    for i in range(n):
        if any(p[i] != first[i] for p in prompts[1:]):
            return i
    return n


def hf_framing(tokenizer: Tokenizer, bos: str, chat: bool, system: str | None):
    """The ids around a prompt's text for a Hugging Face model: the BOS token (`bos`: yes,
    no, or auto: where the tokenizer adds one) and the chat template (`chat`)."""
    lead: list[int] = []
    trail: list[int] = []
    bos_id = getattr(tokenizer, "bos_id", None)
    if bos == "yes" and bos_id is None:
        raise Refused(f"--bos: {tokenizer.name} has no BOS token")
    if chat:
        if not isinstance(tokenizer, HFTokenizer):
            raise Refused("--chat: a chat template needs the model's tokenizer directory")
        try:
            lead, trail = tokenizer.chat(system)
        except (ValueError, AttributeError) as error:
            raise Refused(f"--chat: {tokenizer.name} has no usable chat template: {error}") from None
    adds = bos == "yes" or (bos == "auto" and getattr(tokenizer, "adds_bos", False))
    if adds and lead[:1] != [bos_id]:
        lead = [bos_id, *lead]
    return tuple(lead), tuple(trail)


# ----------------------------------------------------------------------------- decoder


def load_decoder(path: str):
    """The `LMResult` stored in a checkpoint file of `sims.decoder.checkpoint` (UsageError if not one)."""
    # jax and the decoder family only for this backend: the http backends run without them
    import numpy as np

    from weakspots.idealized.decoder.config import LMConfig
    from weakspots.sims.decoder import checkpoint
    from weakspots.sims.store import config_hash

    file = pathlib.Path(path).expanduser()
    try:
        with np.load(file) as data:
            meta = json.loads(bytes(data["meta"]).decode())
        config = LMConfig(**meta["config"])
    except (OSError, KeyError, ValueError, TypeError) as error:
        raise UsageError(f"--checkpoint: {path} is not a decoder checkpoint: {error}") from None
    if file.name != f"{config_hash(config.asdict())}.npz":
        raise UsageError(
            f"--checkpoint: {path} is not named by its config's hash "
            f"({config_hash(config.asdict())}.npz), as sims.decoder.checkpoint writes it"
        )
    result = checkpoint.load(file.parent, config)
    if result is None:
        raise UsageError(f"--checkpoint: {path} cannot be read as a decoder of its config")
    return result


class DecoderBackend(Backend):
    """A decoder trained by this project (`sims.decoder.checkpoint` file), in its own vocabulary.

    Greedy decoding on the whole sequence (no cache), one forward pass per token.
    """

    name = "decoder"

    def __init__(self, path: str):
        import jax
        import jax.numpy as jnp
        from flax import nnx

        from weakspots.sims.decoder.train import merge
        from weakspots.sims.store import config_hash

        result = load_decoder(path)
        self.config = result.config
        self.model_id = config_hash(result.config.asdict())
        graphdef, state = nnx.split(merge(result.config.decoder, result.params))
        self._state = state

        @jax.jit
        def last_logits(state, tokens):
            logits = nnx.merge(graphdef, state)(tokens, start=tokens.shape[1] - 1)[:, -1]
            return jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)

        self._last = last_logits
        self._lock = threading.Lock()

    def tokenizer(self, spec: str) -> Tokenizer:
        raise Refused("--task: a decoder of this project answers the recall task only")

    def check(self, tokenizer: Tokenizer | None) -> None:
        del tokenizer

    def complete(self, prompt: tuple[int, ...], max_tokens: int, text: str | None = None) -> Completion:
        import jax.numpy as jnp
        import numpy as np

        tokens, new, values = list(prompt), [], []
        with self._lock:
            for _ in range(max_tokens):
                logp = np.asarray(self._last(self._state, jnp.asarray([tokens], jnp.int32))[0])
                token = int(np.argmax(logp))
                new.append(token)
                values.append(float(logp[token]))
                tokens.append(token)
        return Completion(" ".join(map(str, new)), tuple(new), tuple(values))


def make_backend(config) -> Backend:
    """The backend a `ProbeConfig` names."""
    if config.backend == "openai":
        return OpenAIBackend(
            config.url, config.model, config.timeout, ids=config.task == "recall", prompt=config.prompt
        )
    if config.backend == "hf":
        return HFBackend(
            config.model, dtype=config.dtype, device=config.device, batch=config.concurrency,
            bos=config.bos, chat=config.chat, system=config.system,
            model_kwargs=getattr(config, "model_kwargs", None),
            press=config.press_spec, question_aware=config.question_aware,
        )  # fmt: skip
    return DecoderBackend(config.checkpoint)


__all__ = [
    "Backend",
    "Completion",
    "DecoderBackend",
    "HFBackend",
    "HFTokenizer",
    "OpenAIBackend",
    "Refused",
    "RequestError",
    "TransientError",
    "make_backend",
]
