"""An OpenAI-compatible HTTP server for the probe's tests (standard library, in a thread).

`serve(model)` starts it on 127.0.0.1 at a free port and returns a `Server` whose `url`
is the API base (`http://127.0.0.1:PORT/v1`). `model(prompt_ids, max_tokens)` returns
`(text, token_ids or None)`. The server counts every completion request per prompt
(`requests`), can fail some on purpose (`flaky(prompt, attempt) -> status or None`),
can delay answers (`delay`), and serves `/tokenize` with `tokenize(text) -> ids` when
given one.

`dialect` picks whose replies it records (from each server's source, so the probe's
parsing is tested without the server): `vllm` (default: `/tokenize` and `/v1/tokenize`
take `{"prompt"}`; ids or text prompts; `tokens`/`token_logprobs`), `llama-server`
(llama.cpp's `tools/server`: `/tokenize` takes `{"content"}` and answers any other body
with `{"tokens": []}`; `logprobs.content[]` with `id`, `token`, `logprob`), and
`llama-cpp-python` (`/extras/tokenize` takes `{"input"}` and puts `bos` first, as its
`Llama.tokenize` does; `/v1/completions` takes text only, answering token ids with
HTTP 500 and pydantic's message). A text prompt is read as `bos` + the text's tokens, token
ids as they are; the other tokenize endpoints put `bos` first where asked for special
tokens (`add_special`, `add_special_tokens`).
"""

from __future__ import annotations

import collections
import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PASSKEY = re.compile(rb"The pass key is (\d+)\.")
QUESTION = re.compile(rb"What is the value of key (\w+)\?")


def prompt_hash(ids) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()


def unit_interval(*parts) -> float:
    """A uniform number in [0, 1) that is a fixed function of `parts`."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


class WeakSpotModel:
    """A synthetic byte-level "model" with known weak spots.

    It reads the pass key (or the queried key's value, in the kv task) from the prompt. Phases count modulo `stride`: with the
    answer's first token at needle phase `needle_phase`, it answers wrong with probability
    `needle_miss` (a fixed function of the prompt: reproducible); whenever the prompt's
    length is at tail phase `tail_phase`, the key's last digit comes back wrong.
    """

    def __init__(self, stride=4, needle_phase=1, needle_miss=0.6, tail_phase=3):
        self.stride, self.needle_phase, self.needle_miss = stride, needle_phase, needle_miss
        self.tail_phase = tail_phase

    def accuracy(self, needle: int, tail: int) -> float:
        """The true probability of a right answer at these phases."""
        if tail == self.tail_phase:
            return 0.0
        return 1.0 - self.needle_miss if needle == self.needle_phase else 1.0

    def __call__(self, ids, max_tokens):
        data = bytes(ids)
        question = QUESTION.search(data)
        if question is not None:  # the kv task: the queried key's first stated value
            match = re.search(rb"key " + question.group(1) + rb" is (\d+)\.", data)
        else:
            match = PASSKEY.search(data)
        if match is None:
            return " I do not know.", None
        key = match.group(1).decode()
        needle, tail = match.start(1) % self.stride, len(ids) % self.stride
        wrong = tail == self.tail_phase
        if needle == self.needle_phase and unit_interval(tuple(ids)) < self.needle_miss:
            wrong = True
        if wrong:
            key = key[:-1] + str((int(key[-1]) + 1) % 10)
        return (" " + key + ". The")[:max_tokens], None


class Server:
    def __init__(self, httpd, thread, state):
        self.httpd, self.thread, self.state = httpd, thread, state
        self.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"

    @property
    def requests(self) -> collections.Counter:
        return self.state["requests"]

    @property
    def answered(self) -> collections.Counter:
        return self.state["answered"]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


DIALECTS = ("vllm", "llama-server", "llama-cpp-python")


def serve(model, *, name="weak", flaky=None, delay=0.0, tokenize=None, dialect="vllm",
          bos=()) -> Server:  # fmt: skip
    state = {
        "requests": collections.Counter(),
        "answered": collections.Counter(),
        "lock": threading.Lock(),
    }

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, status, body, headers=()):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": name, "object": "model"}]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self):
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length))
            routes = {
                "vllm": {"/v1/tokenize": "prompt", "/tokenize": "prompt"},
                "llama-server": {"/tokenize": "content"},
                "llama-cpp-python": {"/extras/tokenize": "input"},
            }[dialect]
            if self.path in routes:
                field = routes[self.path]
                if tokenize is None:
                    self._send(404, {"error": "not found"})
                elif field not in body and dialect == "llama-server":
                    self._send(200, {"tokens": []})  # llama-server: no `content`, no tokens
                elif field not in body:
                    self._send(422, {"detail": [{"msg": "Field required", "loc": [field]}]})
                else:  # the BOS where asked for (llama-cpp-python: always, as Llama.tokenize)
                    special = body.get("add_special", body.get("add_special_tokens", True))
                    lead = list(bos) if special or dialect == "llama-cpp-python" else []
                    self._send(200, {"tokens": lead + tokenize(body[field])})
                return
            if self.path != "/v1/completions":
                self._send(404, {"error": "not found"})
                return
            if body.get("model") != name and dialect == "vllm":
                self._send(404, {"error": f"model {body.get('model')} not found"})
                return
            ids = body["prompt"]
            if isinstance(ids, str):
                if tokenize is None:
                    self._send(400, {"error": "no tokenizer"})
                    return
                ids = list(bos) + tokenize(ids)
            elif dialect == "llama-cpp-python":
                with state["lock"]:
                    state["requests"][prompt_hash(ids)] += 1
                message = "Input should be a valid string"
                self._send(500, {"error": {"message": f"[{{'type': 'string_type', 'msg': '{message}'}}]",
                                           "type": "internal_server_error"}})  # fmt: skip
                return
            key = prompt_hash(ids)
            with state["lock"]:
                state["requests"][key] += 1
                attempt = state["requests"][key]
            status = flaky(ids, attempt) if flaky else None
            if status is not None:
                headers = [("Retry-After", "0")] if status == 429 else []
                self._send(status, {"error": "try again"}, headers)
                return
            if delay:
                time.sleep(delay)
            text, token_ids = model(ids, body["max_tokens"])
            choice = {"index": 0, "text": text, "finish_reason": "length"}
            if body.get("logprobs") is not None and dialect == "llama-server":
                pieces = list(zip(token_ids, text, strict=False)) if token_ids else [
                    (ord(c), c) for c in text]  # fmt: skip
                choice["logprobs"] = {"content": [
                    {"id": i, "token": c, "bytes": list(c.encode()), "logprob": -0.1,
                     "top_logprobs": []} for i, c in pieces]}  # fmt: skip
            elif body.get("logprobs") is not None:
                tokens = (
                    [f"token_id:{t}" for t in token_ids]
                    if token_ids is not None and body.get("return_tokens_as_token_ids")
                    else list(text)
                )
                choice["logprobs"] = {"tokens": tokens, "token_logprobs": [-0.1] * len(tokens)}
            with state["lock"]:
                state["answered"][key] += 1
            self._send(200, {"id": "cmpl", "object": "text_completion", "choices": [choice]})

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    return Server(httpd, thread, state)


if __name__ == "__main__":  # a server for a manual run: python tests/probe_server.py --help
    import argparse

    parser = argparse.ArgumentParser(description="serve the weak-spot model on 127.0.0.1")
    parser.add_argument("--stride", type=int, default=4)
    parser.add_argument("--needle-phase", type=int, default=1)
    parser.add_argument("--needle-miss", type=float, default=0.6)
    parser.add_argument("--tail-phase", type=int, default=3)
    parser.add_argument("--flaky", type=float, default=0.0, help="share of prompts first 500/429")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    args = parser.parse_args()

    def flaky(ids, attempt):
        u = unit_interval("flaky", tuple(ids))
        return (429 if u < args.flaky / 2 else 500) if u < args.flaky and attempt <= 2 else None

    model = WeakSpotModel(args.stride, args.needle_phase, args.needle_miss, args.tail_phase)
    server = serve(model, name="weak", flaky=flaky if args.flaky else None, delay=args.delay)
    print(server.url, flush=True)
    threading.Event().wait()
