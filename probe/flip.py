"""`--task flip`: does a completion flip between candidates as the prompt grows one token at a time?

The paper's completion flip: a user's prompt end (`prefix`) and two or more candidate
continuations; a filler before the prefix is lengthened one token at a time, in
`families` filler families (the filler sentences from a different start each), over
`lengths` consecutive lengths (at least four periods). At every length the model scores
each candidate by its summed token log-probability (teacher-forced: the hf backend runs
the model; an openai server is asked with `echo` for the prompt's log-probabilities);
the candidate with the highest ranks first.

The period: for p = 1 .. lengths // 4 (at least four periods seen), the rule "the first
candidate depends on the prompt length mod p" (each residue's majority winner) explains
`follows(p)` of the rankings; `follows(1)` is the constant rule. The period is the
smallest p with the largest gain `follows(p) - follows(1)`; it counts only when the gain
beats noise: a permutation p-value with the lengths shuffled within each family (2000
permutations, the largest gain over every p each time), `period` None when p >= 0.05
or the gain is 0. Per stride of `--stride`, the same counts at that stride and the mean
log-probability margin of the first candidate over the second per phase.
"""

from __future__ import annotations

import time
import urllib.error

import numpy as np

from weakspots.errors import UsageError
from weakspots.sims.progress import Progress

from .backends import make_backend
from .design import FILLER, ProbeConfig

PERMUTATIONS = 2000
ALPHA = 0.05


def prompts(config: ProbeConfig, tokenizer, lead=(), trail=()):
    """`(family, filler_length, ids)` for every prompt, and each candidate's ids."""
    prefix = list(tokenizer.encode(config.prefix))
    candidates = [tuple(tokenizer.encode(c)) for c in config.candidates]
    if any(not c for c in candidates):
        raise UsageError("--candidate: a candidate encodes to no token")
    n = config.lengths or 4 * config.period
    fixed = len(lead) + len(prefix) + len(trail)
    start = max(int(config.context[0]) - fixed - n + 1, 0)
    out = []
    for family in range(config.families):
        text, i = "", family
        filler: list[int] = []
        while len(filler) < start + n:  # whole sentences from the family's own start on
            text += FILLER[i % len(FILLER)]
            i += 1 + family
            filler = list(tokenizer.encode(text.lstrip()))
        for L in range(start, start + n):
            out.append((family, L, tuple(lead) + tuple(filler[:L]) + tuple(prefix) + tuple(trail)))
    return out, candidates


def hf_scores(backend, prompt, candidates) -> list[float]:
    """Each candidate's summed log-probability after `prompt`, from the hf backend's model."""
    import torch

    longest = max(len(c) for c in candidates)
    rows = [list(prompt) + list(c) + [c[-1]] * (longest - len(c)) for c in candidates]
    ids = torch.tensor(rows, dtype=torch.long, device=backend.device)
    with torch.no_grad():  # right padding: no real token reads a pad
        logits = backend.model(ids).logits.float()
    logp = torch.log_softmax(logits[:, len(prompt) - 1 : len(prompt) - 1 + longest], dim=-1)
    scores = []
    for row, c in enumerate(candidates):
        picked = logp[row, torch.arange(len(c)), torch.tensor(c)]
        scores.append(float(picked.sum()))
    return scores


def openai_scores(backend, prompt, candidates, retries: int = 5) -> list[float]:
    """The same from an OpenAI-compatible server: `echo` returns the prompt's log-probabilities."""
    scores = []
    for c in candidates:
        body = {"model": backend.model_id, "prompt": list(prompt) + list(c), "max_tokens": 1,
                "temperature": 0, "logprobs": 1, "echo": True}  # fmt: skip
        for attempt in range(retries + 1):
            try:
                reply = backend._request("/completions", body, backend.timeout)
                break
            except (urllib.error.URLError, OSError, ValueError) as error:
                if attempt == retries:
                    raise UsageError(f"--url: the server did not score a prompt: {error}") from None
                time.sleep(0.2 * 2**attempt)
        values = (reply["choices"][0].get("logprobs") or {}).get("token_logprobs") or []
        part = values[len(prompt) : len(prompt) + len(c)]
        if len(part) != len(c) or any(v is None for v in part):
            raise UsageError("--backend: the server returns no prompt log-probabilities (echo)")
        scores.append(float(sum(part)))
    return scores


def follows(first: np.ndarray, lengths: np.ndarray, p: int, k: int):
    """How many rankings the rule "first candidate = majority at length mod p" explains, and the rule."""
    counts = np.zeros((p, k), np.int64)
    np.add.at(counts, (lengths % p, first), 1)
    return int(counts.max(axis=1).sum()), counts.argmax(axis=1)


def analyse(rows: list[dict], strides, k: int, seed: int = 0) -> dict:
    """Period, rankings that follow it, and its permutation p-value, from scored rows."""
    first = np.array([r["first"] for r in rows])
    lengths = np.array([r["length"] for r in rows])
    families = np.array([r["family"] for r in rows])
    n_lengths = len(set(r["filler_length"] for r in rows))
    periods = range(1, max(n_lengths // 4, 1) + 1)

    def gains(winners):  # (B, n) winners: follows(p) - follows(1) for every p, (B, len(periods))
        hot = np.eye(k)[winners]  # (B, n, k)
        base = hot.sum(axis=1).max(axis=-1)
        out = []
        for p in periods:
            counts = np.einsum("bnk,np->bpk", hot, np.eye(p)[lengths % p])
            out.append(counts.max(axis=-1).sum(axis=-1) - base)
        return np.stack(out, axis=-1)

    observed = gains(first[None])[0]
    best = int(np.argmax(observed))
    rng = np.random.default_rng([seed, 7])
    shuffled = np.repeat(first[None], PERMUTATIONS, axis=0)
    for f in np.unique(families):  # lengths shuffled within each family
        idx = np.flatnonzero(families == f)
        order = np.argsort(rng.random((PERMUTATIONS, idx.size)), axis=1)
        shuffled[:, idx] = first[idx][order]
    exceed = int((gains(shuffled).max(axis=1) >= observed[best]).sum())
    p_value = (1 + exceed) / (1 + PERMUTATIONS)
    period = periods[best] if observed[best] > 0 and p_value < ALPHA else None
    out = {
        "rankings": len(rows),
        "first_counts": np.bincount(first, minlength=k).tolist(),
        "follows_by_period": {str(p): follows(first, lengths, p, k)[0] for p in periods},
        "best_period": periods[best],
        "gain": int(observed[best]),
        "period_p": p_value,
        "period": period,
        "follows": follows(first, lengths, period or 1, k)[0],
        "rule": follows(first, lengths, period or 1, k)[1].tolist(),
        "by_stride": {},
    }
    margin = np.array([r["logprobs"][0] - r["logprobs"][1] for r in rows])
    for s in strides:
        s = int(s)
        count, rule = follows(first, lengths, s, k)
        out["by_stride"][str(s)] = {
            "follows": count,
            "rule": rule.tolist(),
            "phase_margin": [
                float(margin[lengths % s == j].mean()) if np.any(lengths % s == j) else None
                for j in range(s)
            ],  # fmt: skip
        }
    return out


def flip(config: ProbeConfig, *, progress: bool = False) -> dict:
    """Run the flip task and return its report (`--json` of `weakspots probe --task flip`)."""
    backend = make_backend(config)
    try:
        tokenizer = backend.tokenizer(config.tokenizer)
        backend.check(tokenizer)
        framing = getattr(backend, "framing", None)
        lead, trail = framing(tokenizer) if framing else ((), ())
        items, candidates = prompts(config, tokenizer, lead, trail)
        score = hf_scores if backend.name == "hf" else openai_scores
        bar = Progress("flip", "prompts", enabled=progress)
        bar.plan(len(items))
        rows = []
        try:
            for family, L, prompt in items:
                logprobs = score(backend, prompt, candidates)
                rows.append({"family": family, "filler_length": L, "length": len(prompt),
                             "logprobs": logprobs, "first": int(np.argmax(logprobs))})  # fmt: skip
                bar.update(1)
        finally:
            bar.close()
    finally:
        backend.close()
    report = {
        "backend": backend.name,
        "model": backend.model_id,
        "tokenizer": tokenizer.name,
        "task": "flip",
        "prefix": config.prefix,
        "candidates": list(config.candidates),
        "candidate_ids": [list(c) for c in candidates],
        "families": config.families,
        "strides": [int(s) for s in config.stride],
        "compression": None if config.compression is None else config.compression.asdict(),
        "rows": rows,
    }
    report.update(analyse(rows, config.stride, len(candidates), config.seed))
    return report


def format_flip(report: dict) -> str:
    """The flip report as text."""
    names = report["candidates"]
    lines = [
        f"flip {report['backend']} {report['model']}: {report['rankings']} rankings of "
        + ", ".join(repr(c) for c in names)
        + "; first: "
        + ", ".join(f"{names[i]!r} {n}" for i, n in enumerate(report["first_counts"])),
    ]
    if report["period"] is None:
        lines.append(
            f"no period beyond noise (best p = {report['best_period']}, gain {report['gain']}, "
            f"permutation p = {report['period_p']:.4f})"
        )
    else:
        rule = ", ".join(f"{j}: {names[w]!r}" for j, w in enumerate(report["rule"]))
        lines.append(
            f"period {report['period']} (permutation p = {report['period_p']:.4f}): "
            f"{report['follows']} of {report['rankings']} rankings follow it ({rule}, by length mod "
            f"{report['period']})"
        )
    for s, st in report["by_stride"].items():
        margin = ", ".join("-" if m is None else f"{m:+.2f}" for m in st["phase_margin"])
        lines.append(f"stride {s}: {st['follows']} follow the majority by phase; margin "
                     f"log p({names[0]!r}) - log p({names[1]!r}) by phase: {margin}")  # fmt: skip
    return "\n".join(lines)


__all__ = ["analyse", "flip", "follows", "format_flip", "prompts"]
