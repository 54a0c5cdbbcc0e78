"""`weakspots probe`: a phase scan of a real model (served, local, or a decoder trained here)."""

from __future__ import annotations

import argparse
import sys

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
        help="byte (id = byte value), server (the server's tokenize endpoint: vLLM's, SGLang's, "
        "llama-server's or llama-cpp-python's), a tokenizer directory, "
        "or auto (the model's own: server for openai, the model directory for hf)",
    )
    model.add_argument(
        "--checkpoint", help="a decoder checkpoint (sims.decoder.checkpoint): decoder backend, recall task"
    )
    model.add_argument(
        "--prompt", default=_DEFAULT.prompt,
        help="openai: ids (token ids), text (checked by a round trip through the server's "
        "tokenizer; for servers that take no ids), or auto (text for llama-cpp-python's server)",
    )  # fmt: skip
    model.add_argument(
        "--dtype", default=_DEFAULT.dtype,
        help="hf: auto (float32 on CPU, the checkpoint's own elsewhere), float32, bfloat16, float16",
    )  # fmt: skip
    model.add_argument("--device", default=_DEFAULT.device, help="hf: auto, cpu, cuda, cuda:N, mps")
    model.add_argument(
        "--chat", action="store_true", help="hf: wrap each prompt in the tokenizer's chat template"
    )
    model.add_argument("--system", help="hf, with --chat: a system prompt")
    model.add_argument(
        "--bos", default=_DEFAULT.bos,
        help="hf: put the BOS token first: yes, no, auto (where the tokenizer does)",
    )  # fmt: skip
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
        "--control", action="store_true",
        help="the control design: the shifts' filler drawn as in the scan, no position moved "
        "(a phase effect there is the text's)",
    )  # fmt: skip
    design.add_argument(
        "--plan", metavar="FILE",
        help="records: write each prompt's residue, target_position, query_position and length "
        "as JSON lines to FILE and stop (no model is loaded, no request sent)",
    )  # fmt: skip
    design.add_argument("--prefix", help="flip: the prompt's end the candidates continue")
    design.add_argument(
        "--candidate", action="append", dest="candidates", default=[], metavar="TEXT",
        help="flip: a candidate continuation (give two or more)",
    )  # fmt: skip
    design.add_argument(
        "--lengths", type=int, help="flip: filler lengths per family, one token apart "
        "(default and least: 4 periods)",
    )  # fmt: skip
    design.add_argument(
        "--families", type=int, default=_DEFAULT.families, help="flip: filler families"
    )
    compress = parser.add_argument_group("compression (hf backend)")
    compress.add_argument(
        "--compress", metavar="OP",
        help="read tokens older than --local-window only through chunked entries pooled by OP: "
        "mean_pool, max_pool, softmax_pool, deepseek_v4",
    )  # fmt: skip
    compress.add_argument("--window", type=int, default=_DEFAULT.window, help="W: tokens per entry")
    compress.add_argument(
        "--compress-stride", type=int, help="S: a window starts every S tokens (default W)"
    )
    compress.add_argument(
        "--local-window", type=int, default=_DEFAULT.local_window,
        help="recent tokens read exactly",
    )  # fmt: skip
    compress.add_argument(
        "--compress-weights", metavar="NPZ",
        help="given operator weights (softmax_pool: pooling_logits; deepseek_v4: wgate, ape, "
        "wkv; a leading layer axis); default: random from --seed",
    )  # fmt: skip
    presses = parser.add_argument_group("KV-cache presses (hf backend)")
    presses.add_argument(
        "--press", action="append", dest="presses", default=[], metavar="SPEC",
        help="a press as Python call syntax, e.g. 'ChunkKVPress(press=SnapKVPress("
        "compression_ratio=0.5), chunk_length=8)': kvpress's presses (pip install "
        "weakspots[kvpress]) or the project's (BlockSelectionPress, PlantedPress); the context is "
        "compressed at prefill, the question and answer decoded after it. Repeat for a scan of "
        "several; the uncompressed model runs first on the same prompts",
    )  # fmt: skip
    presses.add_argument(
        "--question-aware", action="store_true",
        help="with --press: the question inside the compressed context (kvpress's "
        "question-aware setting); default: compressed before the question is seen",
    )  # fmt: skip
    presses.add_argument(
        "--no-dense", action="store_true",
        help="with --press: skip the uncompressed control run",
    )  # fmt: skip
    running = parser.add_argument_group("running")
    running.add_argument("--store", help="directory of the trial store (weakspots.load reads it)")
    running.add_argument(
        "--resume", action="store_true", help="ask only the trials the store does not hold"
    )
    running.add_argument(
        "--concurrency", type=int, default=_DEFAULT.concurrency,
        help="openai: requests in flight; hf: prompts decoded together in one batch",
    )  # fmt: skip
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
    "trials", "digits", "facts", "seed", "control", "prompt", "dtype", "device", "chat", "system",
    "bos", "concurrency", "max_retries", "timeout",
    "store", "resume",
    "compress", "window", "compress_stride", "local_window", "compress_weights", "prefix",
    "candidates", "lengths", "families", "question_aware",
)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from weakspots.probe.run import probe

    if not args.backoff >= 0:
        raise common.UsageError(f"--backoff: seconds >= 0, got {args.backoff}")
    if args.no_dense and not args.presses:
        raise common.UsageError("--no-dense: applies with --press")
    first = args.presses[0] if args.presses else None
    config = ProbeConfig(press=first, **{name: getattr(args, name) for name in FIELDS})
    if args.plan is not None or config.task == "flip":
        return _protocols(args, config)
    if args.presses:
        return _scan(args, config)
    report = probe(config, progress=common.progress_enabled(args), backoff=args.backoff)
    if args.figures:
        from weakspots.figures.probe import save

        report["figures"] = save(report, args.figures)
        if config.task == "records":
            from weakspots.figures.probe_profiles import save_records

            report["figures"] += save_records(report, args.figures)
    if args.json:
        common.print_json(report)
    else:
        print(format_report(report))
    if report["planned"] and not report["trials"] and not report["unasked"]:
        first = report["failed_trials"][0]["error"] if report["failed_trials"] else "-"
        first = " ".join(str(first).split())
        print(
            f"weakspots probe: error: no trial scored: all {report['failed']} failed "
            f"(the first: {first})",
            file=sys.stderr,
        )
        return 1
    return 0


def _scan(args: argparse.Namespace, config: ProbeConfig) -> int:
    """`--press SPEC` (repeated): the uncompressed control, then each press, on the same prompts."""
    from weakspots.probe.scan import press_scan, press_table

    reports = press_scan(config, args.presses, dense=not args.no_dense,
                         progress=common.progress_enabled(args), backoff=args.backoff)  # fmt: skip
    if args.figures:
        from weakspots.figures.probe_presses import save

        paths = save(reports, args.figures)
        for report in reports:
            report["figures"] = paths
    if args.json:
        common.print_json(reports)
    else:
        print("\n\n".join(format_report(r) for r in reports))
        print()
        print(format_press_table(press_table(reports)))
    return 0 if any(r["trials"] for r in reports) or not any(r["planned"] for r in reports) else 1


def format_press_table(rows: list[dict]) -> str:
    """The per-method summary (`probe.scan.press_table`) as text."""
    body = [
        [r["method"] + (" (question-aware)" if r["question_aware"] else ""), r["stride"], r["trials"],
         "-" if r["mean"] is None else f"{r['mean']:.3f}", r["worst_phase"],
         _ci(r["delta_max"], r["delta_max_ci"]), "-" if r["p"] is None else f"{r['p']:.4f}",
         "none" if r["dominant_period"] is None else format(r["dominant_period"], "g")]
        for r in rows
    ]  # fmt: skip
    return common.table(["method", "stride", "trials", "mean", "worst phase", "delta_max [95%]",
                         "p", "period"], body)  # fmt: skip


def _protocols(args: argparse.Namespace, config: ProbeConfig) -> int:
    """`--plan FILE` (records: the prompts' layout, no model) and `--task flip`."""
    if args.plan is not None:
        from weakspots.probe.records import moments, plan_rows, write_plan
        from weakspots.probe.run import early_plan

        if config.task != "records":
            raise common.UsageError("--plan: applies to --task records")
        early = early_plan(config)
        if early is None:
            raise common.UsageError("--plan: needs a tokenizer read here (byte or a directory)")
        count = write_plan(early[2], args.plan)
        summary = {"plan": args.plan, "prompts": count,
                   "query_positions": sorted({r["query_position"] for r in plan_rows(early[2])}),
                   "moments": {str(r): list(m) for r, m in moments(plan_rows(early[2])).items()}}  # fmt: skip
        if args.json:
            common.print_json(summary)
        else:
            print(f"{count} prompts to {args.plan}; query positions {summary['query_positions']}")
        return 0
    from weakspots.probe.flip import flip, format_flip

    report = flip(config, progress=common.progress_enabled(args))
    if args.figures:
        from weakspots.figures.probe_profiles import save_flip

        report["figures"] = save_flip(report, args.figures)
    if args.json:
        common.print_json(report)
    else:
        print(format_flip(report))
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
        f"{report['tokenizer']}"
        + (", control design: phases are the labels k, t" if report.get("design") == "control" else "")
        + (f", press {report['press']} ({report['press_library']}"
           + (", question-aware)" if report.get("question_aware") else ")") if report.get("press") else "")
        + f"): {report['trials']} trials scored, {report['failed']} failed"
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
                f"{'none (flat)' if period is None else format(period, 'g')}"
            )
            buckets = st[f"{prefix}buckets"]
            if buckets:
                lines.append(
                    f"{name} buckets: "
                    + ", ".join(f"{k} {'-' if v is None else format(v, '.3f')}" for k, v in buckets.items())
                )
    return "\n".join(lines)
