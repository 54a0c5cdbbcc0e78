"""`weakspots probe`: a phase scan of a real model (served, local, or a decoder trained here)."""

from __future__ import annotations

import argparse

from weakspots.probe.design import BACKENDS, TASKS, ProbeConfig

from . import common

_DEFAULT = ProbeConfig(url="-", model="-")


def _ints(flag: str):
    def parse(text: str) -> tuple[int, ...]:
        try:
            return tuple(int(v) for v in text.split(",") if v.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"comma-separated integers, got {text!r}") from None

    parse.__name__ = flag
    return parse


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated numbers, got {text!r}") from None


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "probe",
        help="phase scan of a real model: needle and prompt end at exact token offsets",
        description=(
            "Ask a model (an OpenAI-compatible server, a local Hugging Face model, or a decoder "
            "trained by weakspots) for a pass key or a value placed at every phase of the "
            "strides, with prompts built in token space, and report accuracy by needle phase "
            "(answer index mod s) and tail phase (prompt length mod s), with 95% Wilson "
            "intervals, delta_max with its interval and permutation p-value, psc and the "
            "window buckets."
        ),
        epilog=common.examples(
            "weakspots probe --backend openai --url http://localhost:8000/v1 --model M "
            "--tokenizer byte --stride 4 --context 2048 --trials 16 --store probe-m --json",
            "weakspots probe --url URL --model M --tokenizer server --stride 2,4,8,128 "
            "--context 4096,16384 --depth 0.1,0.5,0.9 --concurrency 16 --store s --resume",
            "weakspots probe --backend hf --model ./tiny --tokenizer byte --context 256",
            "weakspots probe --backend decoder --checkpoint ~/.cache/weakspots/lm/H.npz "
            "--task recall",
        ),
    )
    model = parser.add_argument_group("model")
    model.add_argument("--backend", default=_DEFAULT.backend, help=f"one of {', '.join(BACKENDS)}")
    model.add_argument("--url", help="openai: the API base, e.g. http://host:8000/v1")
    model.add_argument(
        "--model", help="openai: the served model's name; hf: a Hugging Face model directory"
    )
    model.add_argument(
        "--tokenizer",
        default=_DEFAULT.tokenizer,
        help="byte (id = byte value), server (the server's /tokenize), a tokenizer directory, "
        "or auto (the model's own: server for openai, the model directory for hf)",
    )
    model.add_argument(
        "--checkpoint", help="a decoder checkpoint (sims.decoder.checkpoint): decoder backend, recall task"
    )
    design = parser.add_argument_group("design")
    design.add_argument("--task", default=_DEFAULT.task, help=f"one of {', '.join(TASKS)}")
    design.add_argument(
        "--stride", type=_ints("stride"), default=_DEFAULT.stride, metavar="S[,S..]",
        help="strides to resolve phases at (one scan serves all: period lcm)",
    )  # fmt: skip
    design.add_argument(
        "--context", type=_ints("context"), default=_DEFAULT.context, metavar="C[,C..]",
        help="prompt lengths in tokens (each prompt is at most C long)",
    )  # fmt: skip
    design.add_argument(
        "--depth", type=_floats, default=_DEFAULT.depth, metavar="D[,D..]",
        help="needle depths in the filler, fractions in [0, 1]",
    )  # fmt: skip
    design.add_argument(
        "--trials", type=int, default=_DEFAULT.trials,
        help="paired groups per (context, depth) cell; each is lcm(strides) prompts",
    )  # fmt: skip
    design.add_argument("--digits", type=int, default=_DEFAULT.digits, help="digits of an answer")
    design.add_argument("--facts", type=int, default=_DEFAULT.facts, help="kv: facts per prompt")
    design.add_argument("--seed", type=int, default=_DEFAULT.seed, help="seed of the prompts")
    design.add_argument(
        "--neutral", default=_DEFAULT.neutral, help="text of the one token the design shifts by"
    )
    running = parser.add_argument_group("running")
    running.add_argument("--store", help="directory of the trial store (weakspots.load reads it)")
    running.add_argument(
        "--resume", action="store_true", help="ask only the trials the store does not hold"
    )
    running.add_argument(
        "--concurrency", type=int, default=_DEFAULT.concurrency, help="requests in flight"
    )
    running.add_argument(
        "--max-retries", type=int, default=_DEFAULT.max_retries,
        help="retries of a request after 429, 5xx or a timeout",
    )  # fmt: skip
    running.add_argument(
        "--timeout", type=float, default=_DEFAULT.timeout, help="seconds per request"
    )
    running.add_argument(
        "--backoff", type=float, default=0.5, help="seconds before the first retry (then doubled)"
    )
    output = parser.add_argument_group("output")
    output.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    output.add_argument("--quiet", action="store_true", help="no progress on stderr")
    output.add_argument(
        "--figures", metavar="DIR", help="write PNG heatmaps (phase x depth, phase x length) here"
    )
    parser.set_defaults(handler=run)


FIELDS = (
    "backend", "url", "model", "tokenizer", "checkpoint", "task", "stride", "context", "depth",
    "trials", "digits", "facts", "seed", "neutral", "concurrency", "max_retries", "timeout",
    "store", "resume",
)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from weakspots.probe.run import probe

    if not args.backoff >= 0:
        raise common.UsageError(f"--backoff: seconds >= 0, got {args.backoff}")
    config = ProbeConfig(**{name: getattr(args, name) for name in FIELDS})
    report = probe(config, progress=common.progress_enabled(args), backoff=args.backoff)
    if args.figures:
        from weakspots.figures.probe import save

        report["figures"] = save(report, args.figures)
    if args.json:
        common.print_json(report)
    else:
        print(format_report(report))
    return 0


def _ci(value, ci) -> str:
    if value is None:
        return "-"
    if not ci or ci[0] is None:
        return f"{value:.3f}"
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def format_report(report: dict) -> str:
    """The report as text: one table per stride, then its summary lines."""
    lines = [
        f"probe {report['backend']} {report['model']} ({report['task']}, tokenizer "
        f"{report['tokenizer']}): {report['trials']} trials scored, {report['failed']} failed"
        + (f", {report['unasked']} not asked" if report["unasked"] else "")
    ]
    for s, st in report["by_stride"].items():
        rows = []
        for j in range(int(s)):
            rows.append(
                [
                    j,
                    _ci(st["phase_accuracy"][j], st["phase_accuracy_ci"][j]),
                    st["phase_samples"][j],
                    _ci(st["tail_phase_accuracy"][j], st["tail_phase_accuracy_ci"][j]),
                    st["tail_phase_samples"][j],
                ]
            )
        lines += ["", f"stride {s}"]
        if int(s) <= 32:
            lines.append(
                common.table(["phase", "needle accuracy [95%]", "n", "tail accuracy [95%]", "n"], rows)
            )
        for prefix, name in (("", "needle"), ("tail_", "tail")):
            dm, ci, p = st[f"{prefix}delta_max"], st[f"{prefix}delta_max_ci"], st[f"{prefix}delta_max_p"]
            if dm is None:
                lines.append(f"{name}: no phase contrast")
                continue
            psc = st[f"{prefix}psc"]
            period = st[f"{prefix}dominant_period"]
            lines.append(
                f"{name}: delta_max {_ci(dm, ci)} p={p:.4f}, worst phase {st[f'{prefix}worst_phase']}, "
                f"psc {'-' if psc is None else format(psc, '.4f')}, dominant period "
                f"{'-' if period is None else format(period, 'g')}"
            )
            buckets = st[f"{prefix}buckets"]
            if buckets:
                lines.append(
                    f"{name} buckets: "
                    + ", ".join(f"{k} {'-' if v is None else format(v, '.3f')}" for k, v in buckets.items())
                )
    return "\n".join(lines)
