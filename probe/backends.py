"""Who answers a probe: an OpenAI-compatible server, a local Hugging Face model, or a decoder
trained by this project. Each backend checks itself before any trial (`check`) and answers
one prompt of token ids greedily (`complete`).

Errors: `Refused` (a `UsageError`: bad setup found before any trial: one line, exit 2),
`TransientError` (worth retrying: HTTP 429 and 5xx, timeouts, dropped connections),
`RequestError` (not worth retrying: the server rejected this request).
"""

from __future__ import annotations

import abc
import http.client
import json
import math
import os
import pathlib
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass

from weakspots.sims.cli.common import UsageError

from .tokenizers import ByteTokenizer, HFTokenizer, ServerTokenizer, Tokenizer, load_tokenizer

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
    def complete(self, prompt: tuple[int, ...], max_tokens: int) -> Completion:
        """The greedy continuation of `prompt` (token ids), at most `max_tokens` tokens."""

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
    """An OpenAI-compatible server: `POST {url}/completions` with the prompt as token ids.

    `url` is the API base (`http://host:8000/v1`). Requests are greedy (`temperature 0`)
    and ask for one log-probability per token (`logprobs 1`); `ids=True` also asks for the
    tokens as ids (vLLM's `return_tokens_as_token_ids`), for tasks scored on ids.
    """

    name = "openai"

    def __init__(self, url: str, model: str, timeout: float, *, ids: bool = False):
        self.url = url.rstrip("/")
        self.model_id = model
        self.timeout = timeout
        self.ids = ids
        key = api_key()
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._tokenize_endpoint: str | None = None
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

    def tokenize_endpoint(self) -> str | None:
        """The server's `/tokenize` (beside the API base, or at the server's root), if any."""
        if not self._probed:
            self._probed = True
            root = self.url[: -len("/v1")] if self.url.endswith("/v1") else None
            for candidate in [self.url + "/tokenize"] + ([root + "/tokenize"] if root else []):
                body = {"model": self.model_id, "prompt": "a", "add_special_tokens": False}
                try:
                    self._request(candidate, body, CHECK_TIMEOUT)
                except (urllib.error.HTTPError, ValueError, KeyError):
                    continue
                except (urllib.error.URLError, OSError):
                    break
                self._tokenize_endpoint = candidate
                break
        return self._tokenize_endpoint

    def tokenizer(self, spec: str) -> Tokenizer:
        if spec in ("auto", "server"):
            self._reachable()
            endpoint = self.tokenize_endpoint()
            if endpoint is None:
                raise Refused(
                    f"--tokenizer: the server at {self.url} has no /tokenize endpoint; "
                    "pass --tokenizer byte or the model's tokenizer directory"
                )
            return ServerTokenizer(endpoint, self.model_id, self.headers, self.timeout)
        return load_tokenizer(spec)

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

    def check(self, tokenizer: Tokenizer) -> None:
        self._reachable()
        if tokenizer is None or isinstance(tokenizer, ServerTokenizer):
            return
        endpoint = self.tokenize_endpoint()
        if endpoint is None:
            return  # nothing to compare against: the user's tokenizer is taken as given
        ours = tokenizer.encode(CHECK_TEXT)
        try:
            theirs = ServerTokenizer(endpoint, self.model_id, self.headers, CHECK_TIMEOUT).encode(
                CHECK_TEXT
            )
        except (urllib.error.URLError, OSError, ValueError, KeyError):
            return
        if ours != theirs:
            raise Refused(
                f"--tokenizer: {tokenizer.name} does not match the model's vocabulary: "
                f"{CHECK_TEXT[:15]!r}... is {_head(ours)} here but {_head(theirs)} on the server"
            )

    def complete(self, prompt: tuple[int, ...], max_tokens: int) -> Completion:
        body = {
            "model": self.model_id,
            "prompt": list(prompt),
            "max_tokens": max_tokens,
            "temperature": 0,
            "logprobs": 1,
        }
        if self.ids:
            body["return_tokens_as_token_ids"] = True
        try:
            reply = self._request("/completions", body, self.timeout)
        except urllib.error.HTTPError as error:
            detail = _excerpt(error)
            if error.code == 429 or error.code == 408 or error.code >= 500:
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
        try:
            choice = reply["choices"][0]
            text = choice.get("text") or ""
        except (KeyError, IndexError, TypeError):
            raise RequestError(f"no completion in the reply: {str(reply)[:200]}") from None
        logprobs = choice.get("logprobs") or {}
        token_logprobs = logprobs.get("token_logprobs")
        tokens = logprobs.get("tokens")
        ids = None
        if tokens and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
            ids = tuple(int(t.split(":", 1)[1]) for t in tokens)
        values = None
        if token_logprobs and all(isinstance(v, int | float) for v in token_logprobs):
            values = tuple(float(v) for v in token_logprobs)
        return Completion(text, ids, values)


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
    """A local Hugging Face causal LM directory (`transformers`, `torch`), greedy `generate`."""

    name = "hf"

    def __init__(self, path: str):
        try:
            import torch  # noqa: F401
            from transformers import AutoModelForCausalLM
        except ImportError:
            raise UsageError(
                "--backend: hf needs torch and transformers (pip install weakspots[hf])"
            ) from None
        self.path = pathlib.Path(path).expanduser()
        if not (self.path / "config.json").is_file():
            raise Refused(f"--model: {path} is not a Hugging Face model directory (no config.json)")
        self.model_id = str(self.path.resolve())
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # the probe's own bar is the one progress report
        try:
            self.model = AutoModelForCausalLM.from_pretrained(str(self.path))
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        self.model.eval()
        self._lock = threading.Lock()
        self._tokenizer: Tokenizer | None = None

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

    def complete(self, prompt: tuple[int, ...], max_tokens: int) -> Completion:
        import torch

        with self._lock, torch.no_grad():
            ids = torch.tensor([list(prompt)], dtype=torch.long)
            out = self.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_tokens,
                do_sample=False,
                output_scores=True,
                return_dict_in_generate=True,
                pad_token_id=self.model.config.eos_token_id
                if self.model.config.pad_token_id is None
                else self.model.config.pad_token_id,
            )
            new = out.sequences[0, ids.shape[1] :].tolist()
            logprobs = tuple(
                float(torch.log_softmax(score[0].float(), -1)[token])
                for score, token in zip(out.scores, new, strict=False)
            )
        tokenizer = self._tokenizer or ByteTokenizer()
        return Completion(tokenizer.decode(new), tuple(new), logprobs)


# ----------------------------------------------------------------------------- decoder


def load_decoder(path: str):
    """The `LMResult` stored in a checkpoint file of `sims.decoder.checkpoint` (UsageError if not one)."""
    import numpy as np

    from weakspots.idealized.decoder.config import LMConfig
    from weakspots.sims.decoder import checkpoint
    from weakspots.sims.runs.store import config_hash

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
        from weakspots.sims.runs.store import config_hash

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

    def complete(self, prompt: tuple[int, ...], max_tokens: int) -> Completion:
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
        return OpenAIBackend(config.url, config.model, config.timeout, ids=config.task == "recall")
    if config.backend == "hf":
        return HFBackend(config.model)
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
