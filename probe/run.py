"""Running a probe the way a long evaluation must: keyed, stored, resumable, retried.

Each trial's key is `sims.store.config_hash` of the model's identity (backend, model),
the tokenizer, the task, the seed, the design period, the trial's coordinates and the
sha256 of its prompt ids. With a store, every answer is a row of `sims.store`
(`write_run`: written to a temporary file, fsynced, renamed), written by the worker
that asked before that worker sends its next request, so a SIGKILL loses at most the
requests in flight, and `weakspots.load(store)` reads the trials back as a table.
`resume=True` sends no scored trial of the store again (failed ones, which hold no
answer, are asked again). A request that meets HTTP 429 / 5xx / a timeout is retried
up to `max_retries` times with exponential backoff (the server's `Retry-After` when it
gives one); a trial that still fails is stored as failed and reported, never scored.
"""

from __future__ import annotations

import hashlib
import pathlib
import queue
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from weakspots.errors import ConfigError, UsageError
from weakspots.sims import store as result_store
from weakspots.sims.progress import Progress

from .backends import (
    Backend,
    Completion,
    Refused,
    RequestError,
    TransientError,
    hf_framing,
    load_decoder,
    make_backend,
)
from .design import ProbeConfig, Trial, recall_trials, text_trials
from .report import phase_report
from .tokenizers import load_tokenizer

BACKOFF_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 30.0
FAILED_SHOWN = 20


@dataclass(frozen=True)
class Outcome:
    """What one trial came to: scored (`correct`) or failed (`error`), and how many attempts."""

    correct: bool | None
    continuation: str
    error: str | None
    attempts: int
    token_logprobs: tuple[float, ...] | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


def trial_key(identity: dict, tokenizer: str, config: ProbeConfig, trial: Trial) -> dict:
    """The scalars that name a trial in the store (their hash is its key)."""
    return {
        **identity,
        "tokenizer": tokenizer,
        "task": config.task,
        "seed": config.seed,
        "period": config.period,
        **trial.coordinates,
        "prompt_sha256": hashlib.sha256(",".join(map(str, trial.prompt)).encode()).hexdigest(),
    }


def is_correct(trial: Trial, completion: Completion, by_ids: bool) -> bool:
    """Exact match: the continuation begins with the answer and the answer ends there.

    On ids (`by_ids`): the first tokens are the answer's. On text: after leading
    whitespace the text starts with the answer, followed by no further letter or digit.
    A chat reply (`trial.reply`): its first number is the answer.
    """
    if by_ids:
        ids = completion.token_ids or ()
        return tuple(ids[: len(trial.answer_ids)]) == trial.answer_ids
    if trial.reply:
        number = re.search(r"\d+", completion.text)
        return number is not None and number.group() == trial.answer
    text = completion.text.lstrip()
    if not text.startswith(trial.answer):
        return False
    rest = text[len(trial.answer) :]
    return not (rest[:1].isalnum())


def ask(
    backend: Backend,
    trial: Trial,
    *,
    max_retries: int,
    backoff: float,
    by_ids: bool,
    stop: threading.Event | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """One trial, retried on transient errors; never raises for a failed request."""
    error = None
    for attempt in range(max_retries + 1):
        if stop is not None and stop.is_set():
            break
        try:
            completion = backend.complete_trials([trial])[0]
        except TransientError as transient:
            error = str(transient)
            if attempt < max_retries:
                delay = transient.retry_after
                if delay is None:
                    delay = backoff * 2**attempt * (0.5 + random.random())
                sleep(min(delay, BACKOFF_CAP_SECONDS))
            continue
        except RequestError as rejected:
            return Outcome(None, "", str(rejected), attempt + 1)
        return scored(trial, completion, by_ids, attempt + 1)
    return Outcome(None, "", error or "interrupted", max_retries + 1)


def scored(trial: Trial, completion: Completion, by_ids: bool, attempts: int) -> Outcome:
    """The outcome of one answered trial (unscorable, not wrong, when ids are missing)."""
    if by_ids and completion.token_ids is None:
        return Outcome(None, completion.text, "the reply holds no token ids to score", attempts)
    correct = is_correct(trial, completion, by_ids)
    return Outcome(correct, completion.text, None, attempts, completion.token_logprobs)


def ask_many(backend: Backend, trials: list[Trial], *, by_ids: bool, **retry) -> list[Outcome]:
    """Trials answered as one batch (`Backend.complete_many`); one by one, with retries,
    where the batch fails on a request error."""
    try:
        completions = backend.complete_trials(trials)
    except (TransientError, RequestError):
        return [ask(backend, t, by_ids=by_ids, **retry) for t in trials]
    return [scored(t, c, by_ids, 1) for t, c in zip(trials, completions, strict=True)]


def _row(trial: Trial, outcome: Outcome) -> dict:
    logprobs = list(outcome.token_logprobs) if outcome.token_logprobs else None
    return {
        "needle_index": trial.needle_index,
        "prompt_length": trial.prompt_length,
        "block": trial.block,
        "answer": trial.answer,
        "continuation": outcome.continuation,
        "correct": outcome.correct,
        "failed": outcome.failed,
        "error": outcome.error,
        "attempts": outcome.attempts,
        "logprob": float(sum(logprobs)) if logprobs else None,
        **({"token_logprobs": logprobs} if logprobs else {}),
    }


def stored_rows(store: str, hashes: set[str]) -> dict[str, dict]:
    """The stored rows among `hashes`, by hash (a missing store has none)."""
    import pandas as pd

    try:
        table = result_store.load(store, on_damaged="warn")
    except FileNotFoundError:
        return {}
    if "hash" not in table or table.empty:
        return {}
    table = table[table["hash"].isin(hashes)]
    rows = {}
    for record in table.to_dict("records"):
        rows[record["hash"]] = {k: (None if _missing(v, pd) else v) for k, v in record.items()}
    return rows


def _missing(value, pd) -> bool:
    return not isinstance(value, list | tuple) and bool(pd.isna(value))


def early_plan(config: ProbeConfig):
    """The trials that need no network call and no model: those of a text task with a
    tokenizer read here (`byte`, a directory; for hf, the model's own), as
    `(tokenizer, framing, trials)`; None otherwise. Built before the backend, so a design
    the context cannot hold is refused before any request or model load."""
    if config.task == "recall":
        return None
    spec = config.tokenizer
    if spec == "auto" and config.backend == "hf":
        model = pathlib.Path(str(config.model)).expanduser()
        if not any((model / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
            raise Refused(
                f"--tokenizer: {config.model} holds no tokenizer; pass --tokenizer byte or a "
                "tokenizer directory"
            )
        spec = str(model)
    if spec in ("auto", "server"):
        return None
    tokenizer = load_tokenizer(spec)
    frame = ((), ())
    if config.backend == "hf":
        frame = hf_framing(tokenizer, config.bos, config.chat, config.system)
    return tokenizer, frame, text_trials(config, tokenizer, *frame)


def plan(config: ProbeConfig, backend: Backend, early=None):
    """The tokenizer and every trial of the scan (checks the backend first). `early`: what
    `early_plan` built, kept where the backend frames prompts the same way."""
    if config.task == "recall":  # built in the decoder's own vocabulary: no tokenizer
        backend.check(None)
        return "decoder", recall_trials(config, load_decoder(config.checkpoint).config)
    tokenizer = early[0] if early is not None else backend.tokenizer(config.tokenizer)
    backend.check(tokenizer)
    frame = backend.framing(tokenizer)
    if early is not None and early[1] == frame:
        return tokenizer.name, early[2]
    return tokenizer.name, text_trials(config, tokenizer, *frame)


def probe(
    config: ProbeConfig | None = None,
    *,
    client: Backend | None = None,
    progress: bool | Progress = False,
    backoff: float = BACKOFF_SECONDS,
    **fields,
) -> dict:
    """Run a phase scan and return its report (the `--json` of `weakspots probe`).

    `config`: a `ProbeConfig`, or its fields as keyword arguments (`url=`, `model=`,
    `stride=(4, 8)`, ...). `client`: an already built `Backend` (default: the one the
    config names). `progress`: a `Progress`, or True for one on stderr. `backoff`:
    seconds before the first retry (doubled at each next one, jittered).

    Raises `ConfigError`/`UsageError` (bad input, an unreachable server, a tokenizer
    that does not match the model) before any trial is sent.
    """
    config = ProbeConfig(**fields) if config is None else config.replace(**fields)
    if config.store is not None:
        try:
            result_store.prepare(config.store)
        except result_store.StoreError as error:
            raise UsageError(f"--store: {error}") from None
    early = early_plan(config)
    owned = client is None
    backend = make_backend(config) if owned else client
    try:
        return _probe(config, backend, progress, backoff, early)
    finally:
        if owned:
            backend.close()


def _probe(config: ProbeConfig, backend: Backend, progress, backoff: float, early=None) -> dict:
    tokenizer_name, trials = plan(config, backend, early)
    keys = [trial_key(backend.identity, tokenizer_name, config, t) for t in trials]
    hashes = [result_store.config_hash(k) for k in keys]
    if len(set(hashes)) != len(hashes):
        raise ConfigError("trials", "two trials of the scan are the same prompt")
    rows: dict[str, dict] = {}
    if config.store is not None:
        rows = stored_rows(config.store, set(hashes))
        if rows and not config.resume:
            raise UsageError(
                f"--store: {config.store} already holds {len(rows)} trials of this scan; "
                "pass --resume to continue it, or another --store"
            )
    answered = {h for h, r in rows.items() if not r.get("failed")}
    pending = [(t, k, h) for t, k, h in zip(trials, keys, hashes, strict=True) if h not in answered]
    bar = progress if isinstance(progress, Progress) else Progress("probe", "trials", enabled=bool(progress))
    bar.plan(len(trials), done=len(trials) - len(pending))
    try:
        fresh = _execute(config, backend, pending, bar, backoff)
    finally:
        if not isinstance(progress, Progress):
            bar.close()
    rows.update(fresh)
    return summarise(config, backend, trials, hashes, rows, tokenizer_name)


def _execute(config, backend, pending, bar: Progress, backoff: float) -> dict[str, dict]:
    """Ask every pending trial with `config.concurrency` workers; rows by hash."""
    by_ids = config.task == "recall"
    work: queue.Queue = queue.Queue()
    for item in pending:
        work.put(item)
    done: queue.Queue = queue.Queue()
    stop = threading.Event()

    batch = max(1, int(getattr(backend, "batch_size", 1)))
    retry = dict(max_retries=config.max_retries, backoff=backoff, stop=stop)

    def worker():
        while not stop.is_set():
            items = []
            while len(items) < batch:
                try:
                    items.append(work.get_nowait())
                except queue.Empty:
                    break
            if not items:
                return
            run_hash = items[0][2]
            try:
                trials = [trial for trial, _, _ in items]
                if len(items) == 1:
                    outcomes = [ask(backend, trials[0], by_ids=by_ids, **retry)]
                else:
                    outcomes = ask_many(backend, trials, by_ids=by_ids, **retry)
                for (trial, key, run_hash), outcome in zip(items, outcomes, strict=True):
                    row = _row(trial, outcome)
                    if stop.is_set() and outcome.failed:
                        return  # interrupted, not failed: leave it for --resume
                    if config.store is not None:
                        result_store.write_run(config.store, key, row)
                    done.put((run_hash, {**key, **row}, None))
            except BaseException as error:  # a bug or a broken store: the main thread raises it
                done.put((run_hash, None, error))
                return

    # A backend that batches (hf) answers one batch of `batch` prompts at a time; a server
    # gets `concurrency` requests in flight.
    count = 1 if batch > 1 else min(config.concurrency, max(len(pending), 1))
    workers = [threading.Thread(target=worker, daemon=True, name=f"probe-{i}") for i in range(count)]
    for thread in workers:
        thread.start()
    rows: dict[str, dict] = {}
    try:
        while len(rows) < len(pending):
            try:
                run_hash, row, error = done.get(timeout=0.2)
            except queue.Empty:
                if not any(t.is_alive() for t in workers) and done.empty():
                    break
                continue
            if error is not None:
                raise error
            rows[run_hash] = row
            bar.update(1)
    except BaseException:
        stop.set()
        raise
    return rows


def summarise(config, backend, trials, hashes, rows, tokenizer_name) -> dict:
    """The report of a scan from its trials' rows (missing rows count as not yet asked)."""
    scored_trials, failed = [], []
    for trial, run_hash in zip(trials, hashes, strict=True):
        row = rows.get(run_hash)
        if row is None:
            continue
        if row.get("failed"):
            failed.append({"hash": run_hash, **trial.coordinates, "error": row.get("error")})
            continue
        # the control design's shifts move no position: its phases are the labels k, t
        c = trial.coordinates
        scored_trials.append(
            {
                "needle_index": c["needle_shift"] if config.control else trial.needle_index,
                "prompt_length": c["tail_shift"] if config.control else trial.prompt_length,
                "correct": bool(row["correct"]),
                "block": trial.block,
                "depth": trial.coordinates["depth"],
                "context": trial.coordinates["context"],
                "logprob": row.get("logprob"),
            }
        )
    report = {
        "backend": backend.name,
        "model": backend.model_id,
        "tokenizer": tokenizer_name,
        "task": config.task,
        "design": "control" if config.control else "phase",
        "strides": [int(s) for s in config.stride],
        "period": config.period,
        "planned": len(trials),
        "trials": len(scored_trials),
        "failed": len(failed),
        "unasked": len(trials) - len(scored_trials) - len(failed),
        # prompts whose text the tokenizer would not encode to their ids (None: not checked)
        "unnatural": _unnatural(trials),
        "failed_trials": failed[:FAILED_SHOWN],
        "seed": config.seed,
        "store": config.store,
    }
    identity = backend.identity
    if "press" in identity:  # probe.press: which press, from which library and version
        report.update({k: identity[k] for k in ("press", "press_library", "question_aware")})
    report.update(phase_report(scored_trials, config.stride, config.seed))
    # Group g's tail shift is (k + g) mod S, so at stride s the needle and tail phases are
    # fully crossed once a cell holds a multiple of s groups (text tasks; recall has one tail).
    for stride, stats in report["by_stride"].items():
        stats["crossed"] = config.task != "recall" and config.trials % int(stride) == 0
    report["crossed"] = report["by_stride"][str(report["stride"])]["crossed"]
    return report


def _unnatural(trials) -> int | None:
    checked = [t.natural for t in trials if t.natural is not None]
    return sum(not n for n in checked) if checked else None
