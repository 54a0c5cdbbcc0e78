"""`weakspots lm train`: train small decoders with compressed attention and measure them per phase."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

import numpy as np

from weakspots.idealized.decoder.config import V4_DESIGN, V4_FIELDS, LMConfig, with_design
from weakspots.idealized.decoder.layers.registry import layer_kind_names
from weakspots.idealized.decoder.layers.registry import lookup as layer_kind
from weakspots.idealized.operators.base import DECODER
from weakspots.idealized.operators.registry import operator_names

from . import common, copy_phase, lookup, pretrain, pretrain_mechanism

_DEFAULT = LMConfig()

HELP = {
    "seq_len": "tokens per sequence T (context plus the queries)",
    "pairs": "key-value facts per sequence P",
    "key_len": "tokens per key",
    "value_len": "tokens per value",
    "key_vocab": "key tokens (each sequence's key tokens are distinct)",
    "value_vocab": "value tokens",
    "filler_vocab": "filler tokens between the facts",
    "layers": "decoder layers L",
    "layout": f"comma-separated layer kinds ({', '.join(layer_kind_names())}); "
    "default: first sliding, the rest compressed",
    "d_model": "model width D",
    "heads": "attention heads H",
    "mlp": "MLP hidden width in multiples of D (0: no MLP)",
    "stride": "tokens per compressed entry s (also the period phases are counted in)",
    "operator": f"one of {', '.join(operator_names(DECODER))} (none: dense control)",
    "overlap": "deepseek_v4: windows of 2s tokens with stride s, as CSA",
    "stagger": "shift head h's compressed windows by h*s//H tokens (needs --heads >= 2)",
    "phase_entropy": "add -W x mean entropy of the pooling weights to the loss "
    f"({', '.join(operator_names(DECODER, distribution=True, fixed_weights=False))})",
    "window": "tokens a sliding layer sees",
    "local_window": "uncompressed recent tokens a compressed layer also sees (0: none)",
    "rope_dim": "RoPE channels per head",
    "rank": "rank of low_rank's per-phase corrections",
    "steps": "training steps",
    "batch": "sequences per step",
    "eval_every": "steps between held-out evaluations",
    "eval_batch": "held-out sequences of the running evaluation",
    "eval_samples": "final evaluation: sequences per position of the queried value",
    "eval_seed": "seed of the held-out sequences",
    "lr": "AdamW peak learning rate",
    "weight_decay": "AdamW weight decay (matrices)",
    "warmup": "linear warmup steps (then cosine decay to lr/10)",
    "clip": "global gradient-norm clip",
    "seed": "seed",
    "hca_stride": "tokens per entry of an hca layer m' (disjoint windows, no indexer)",
    "indexer_topk": "csa/compressed: entries each query keeps by the Lightning Indexer's top-k (0: all)",
    "index_heads": "the indexer's heads",
    "index_dim": "the indexer's head width",
    "shared_kv": "one K = V head and one compressor for all query heads (else one per head)",
    "sink": "a learned attention-sink logit per head",
    "qk_norm": "RMSNorm on the queries (per head) and on the KV",
    "rope_fraction": "RoPE on int(F x head dim) channels of each head (0: --rope-dim)",
    "compress_rope_theta": "RoPE base of the csa and hca layers",
    "q_rank": "rank of the low-rank query path (0: one projection)",
    "o_groups": "groups of heads of the grouped low-rank output projection (0: one projection)",
    "o_rank": "rank of each output group",
    "indexer_kl": "weight of the indexer's KL to the main attention in the training loss",
    "separate_values": "not V4's: values from a projection and compressor of their own "
    "(K != V, no RoPE on values), a diagnostic of V4's K = V",
    "indexer_pairs": "not V4's: read the entry before each entry the indexer keeps (csa: both "
    "entries that pool a window together), an intervention on what the attention learns from",
}


class _Given(argparse.Action):
    """Store the value and note the flag as given (so `--design` defaults do not override it)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.__dict__.setdefault("given", set()).add(self.dest)


class _GivenTrue(_Given):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, True, option_string)


class _GivenFalse(_Given):
    """`--no-X`: the switch off, given (so `--design v4` leaves it off)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, False, option_string)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "lm",
        help="decoders with compressed attention trained from scratch (lm train)",
        description="Small decoders with compressed attention on associative recall.",
    )
    verbs = parser.add_subparsers(dest="lm_verb", required=True, parser_class=type(parser))
    train = verbs.add_parser(
        "train",
        help="train decoders (or --seeds K at once); per-phase accuracy",
        description=(
            "Train decoders with compressed attention on multi-query associative recall and "
            "report accuracy by the phase of the queried value and key, by straddling, and "
            "against position, with 95% Wilson intervals."
        ),
        epilog=common.examples(
            "weakspots lm train --steps 400",
            "weakspots lm train --pairs 8 --stride 4 --eval-samples 32 --seeds 4 --json > s4.json",
            "weakspots lm train --pairs 8 --stride 4 --operator none --seeds 4  # dense control",
            "weakspots lm train --design v4 --indexer-topk 4 --seeds 2  # DeepSeek-V4's attention",
        ),
    )
    add_lm_flags(train)
    add_cache_flag(train)
    common.add_output_flags(train)
    train.set_defaults(handler=run_train)
    register_ablate(verbs)
    register_carry(verbs)
    register_prefetch(verbs)
    pretrain.register(verbs)
    lookup.register(verbs)  # `weakspots lm lookup` (cli/lookup.py)
    copy_phase.register(verbs)  # `weakspots lm copy` (cli/copy_phase.py)
    pretrain_mechanism.register(verbs)  # `lm knockout`, `lm gates`, `lm cycle`


def add_cache_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache",
        default=None,
        help="directory of trained decoders, reused by config (sims.decoder.checkpoint); "
        "the same numbers as training anew",
    )


def trained_results(args: argparse.Namespace, base: LMConfig, seeds: list[int], title: str):
    """The runs of `base` at `seeds`: trained, or loaded from (and saved to) `--cache`."""
    directory = None
    if args.cache is not None:
        directory = pathlib.Path(args.cache).expanduser()
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise common.UsageError(
                f"--cache: cannot use {args.cache!r}: {error.strerror}"
            ) from None
    from weakspots.sims.decoder.checkpoint import trained
    from weakspots.sims.progress import Progress

    with Progress(title, "steps", enabled=common.progress_enabled(args)) as progress:
        return trained(
            [base.replace(seed=s) for s in seeds], directory=directory, progress=progress
        )


def add_lm_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per `LMConfig` field (`--seq-len`, `--stride`, ...), plus `--seeds K`."""
    groups = {
        "task": (
            "seq_len",
            "pairs",
            "key_len",
            "value_len",
            "key_vocab",
            "value_vocab",
            "filler_vocab",
        ),
        "model": (
            "layers",
            "layout",
            "d_model",
            "heads",
            "mlp",
            "stride",
            "operator",
            "overlap",
            "stagger",
            "window",
            "local_window",
            "rope_dim",
            "rank",
        ),  # fmt: skip
        "DeepSeek-V4 layers (--layout swa, csa, hca)": V4_FIELDS,
    }
    grouped = {name for names in groups.values() for name in names}
    groups["training"] = tuple(
        f.name for f in dataclasses.fields(LMConfig) if f.name not in grouped
    )
    for title, names in groups.items():
        group = parser.add_argument_group(title)
        for name in names:
            flag = "--" + name.replace("_", "-")
            default = getattr(_DEFAULT, name)
            if isinstance(default, bool):
                group.add_argument(flag, action=_GivenTrue, help=HELP[name])
                group.add_argument(
                    "--no-" + flag[2:], dest=name, action=_GivenFalse,
                    help=f"{flag} off (where --design turns it on)",
                )  # fmt: skip
            else:
                group.add_argument(
                    flag, type=type(default), default=default, action=_Given, help=HELP[name]
                )
    parser.add_argument("--seeds", type=int, default=None, help="train K seeds: seed .. seed+K-1")
    parser.add_argument(
        "--design",
        default="",
        help="v4: DeepSeek-V4's attention at small scale (layout "
        f"{V4_DESIGN['layout']}, indexer top-{V4_DESIGN['indexer_topk']}, shared KV, sinks, "
        "qk-norm, local window, partial RoPE); flags given beside it override its choices",
    )


def lm_config(args: argparse.Namespace) -> LMConfig:
    """The `LMConfig` of the parsed flags; with `--design v4`, `V4_DESIGN` for every flag not
    given (`--layers L` alone lays out V4's schedule over L layers)."""
    names = {f.name for f in dataclasses.fields(LMConfig)}
    values = {k: v for k, v in vars(args).items() if k in names}
    design = getattr(args, "design", "")
    values = with_design(design, values, getattr(args, "given", set()))
    return LMConfig(**values)


def run_train(args: argparse.Namespace) -> int:
    base = lm_config(args)
    seeds = common.seed_list(args)
    from weakspots.sims.decoder.evaluate import phase_summary, seed_spread

    results = trained_results(args, base, seeds, "lm train")
    summaries = [r.summary() for r in results]
    many = args.seeds is not None
    out = common.per_seed_report(base, seeds, summaries, many=many)
    if many:
        out["pooled"] = phase_summary(base, np.stack([r.outcomes for r in results]))
        out["seed_spread"] = seed_spread([s["phase_accuracy"] for s in summaries])
    if args.json:
        common.print_json(out)
    else:
        print(text_report(base, seeds, summaries, out.get("pooled")))
    return 0


def _phase_block(title: str, s: dict) -> str:
    rows = [
        [phase, acc, f"[{ci[0]:.3f}, {ci[1]:.3f}]", n, key_acc]
        for phase, (acc, ci, n, key_acc) in enumerate(
            zip(
                s["phase_accuracy"],
                s["phase_accuracy_ci"],
                s["phase_samples"],
                s["phase_accuracy_by_key_phase"],
                strict=True,
            )
        )
    ]
    straddle = s["straddle_accuracy"]
    delta_ci = s.get("delta_max_ci")
    spread = f" [{delta_ci[0]:.3f}, {delta_ci[1]:.3f}]" if delta_ci else ""
    return "\n".join(
        [
            title,
            common.table(["value phase", "accuracy", "95% CI", "samples", "by key phase"], rows),
            f"phase accuracy {common.sparkline(s['phase_accuracy'])}  mean {s['mean_accuracy']:.3f}  "
            f"delta_max {s['delta_max']:.3f}{spread} (noise floor "
            f"{s['delta_max_noise_floor']:.3f}, intervals: {s['interval']})  "
            f"psc {s['psc']:.4f}  same window {straddle['same_window']['accuracy']:.3f}  "
            f"straddling {straddle['straddling']['accuracy']:.3f}  "
            f"period {s['position_spectrum']['dominant_period']:.3g}",
            _weak_spot_line(s),
            _near_line(s["near_query"]),
        ]
        + (
            [
                "indexer recall per indexed layer "
                + " ".join(f"{r:.3f}" for r in s["indexer_recall"])
            ]
            if s.get("indexer_recall")
            else []
        )
    )


# A budget that shows a weak spot (docs/decoder_runs.md: each of its 4 seeds shows one).
SHOWS_ONE = "weakspots lm train --stride 4 --pairs 8 --steps 2000 --eval-samples 64"


def _weak_spot_line(s: dict) -> str:
    """Whether these runs show a weak spot: delta_max beyond its noise floor, or why not."""
    if s["delta_max"] > s["delta_max_noise_floor"]:
        acc = [float(a) for a in s["phase_accuracy"]]
        worst, best = acc.index(min(acc)), acc.index(max(acc))
        return f"weak spot: delta_max beyond its noise floor (worst phase {worst}, best {best})"
    learning = (
        f" (mean accuracy {s['mean_accuracy']:.2f}: the decoder is still learning the task)"
        if s["mean_accuracy"] < 0.9
        else ""
    )
    return (
        f"no weak spot beyond the noise floor at this budget{learning}; a run that shows one "
        f"(docs/decoder_runs.md): {SHOWS_ONE}"
    )


def _near_line(near: dict) -> str:
    if not near["samples"]:
        return "every fact is beyond the query's uncompressed reach"
    return (
        f"facts within the query's uncompressed reach ({near['reach']} tokens: value at "
        f">= {near['first_value_start']}; left out above): accuracy {near['accuracy']:.3f}"
    )


def text_report(base: LMConfig, seeds: list[int], summaries: list[dict], pooled) -> str:
    v4 = any(layer_kind(kind).v4 for kind in base.layer_kinds)
    operator = f"V4 compressor (top-{base.indexer_topk})" if v4 else base.operator
    if base.indexed and not v4:
        operator += f" (indexer top-{base.indexer_topk})"
    head = (
        f"T={base.seq_len} P={base.pairs} layers={','.join(base.layer_kinds)} "
        f"d={base.d_model} H={base.heads} s={base.stride} {operator} "
        f"lr={base.lr:g} steps={base.steps} batch={base.batch}"
    )
    blocks = [
        _phase_block(
            f"{head} seed={seed}  (final loss {s['final_loss']:.4f}, {s['wall_seconds']:.1f}s, "
            f"{s['tokens_per_second']:.0f} tokens/s)",
            s,
        )
        for seed, s in zip(seeds, summaries, strict=True)
    ]
    if pooled is not None:
        blocks.append(_phase_block(f"{head} pooled over seeds {seeds[0]}..{seeds[-1]}", pooled))
    return "\n\n".join(blocks)


# ----------------------------------------------------------------------------- lm ablate


def register_ablate(verbs) -> None:
    """`weakspots lm ablate`: the flags of `lm train`, plus `--no-patch` and `--cache`."""
    ablate = verbs.add_parser(
        "ablate",
        help="causal interventions per layer x head x phase, and the mechanism verdict",
        description=(
            "Train decoders (or load them from --cache), then ablate each (layer, head), remove "
            "the sliding window, the compressed branch, RoPE from the compressed keys, zero and "
            "roll the learned position bias, and patch the queried fact's compressed entries "
            "from a world where it sits at another phase. Accuracy drops per value phase with "
            "95% intervals (paired, outcomes pooled over seeds), and the mechanism they support."
        ),
        epilog=common.examples(
            "weakspots lm ablate --steps 400",
            "weakspots lm ablate --pairs 4 --steps 1500 --seeds 4 --operator softmax_pool --json",
        ),
    )
    add_lm_flags(ablate)
    ablate.add_argument(
        "--no-patch", action="store_true", help="skip activation patching (s more evaluations)"
    )
    add_cache_flag(ablate)
    common.add_output_flags(ablate)
    ablate.set_defaults(handler=run_ablate)


def run_ablate(args: argparse.Namespace) -> int:
    base = lm_config(args)
    if any(layer_kind(kind).v4 for kind in base.layer_kinds):
        raise common.UsageError(
            "--layout: lm ablate's interventions act on dense, sliding and compressed layers; "
            "swa, csa and hca (--design v4) are trained by lm train only"
        )
    seeds = common.seed_list(args)
    from weakspots.sims.experiments.decoder.ablation import study
    from weakspots.sims.progress import Progress

    enabled = common.progress_enabled(args)
    results = trained_results(args, base, seeds, "lm ablate: train")
    params = study.stacked_params(results)
    with Progress("lm ablate", "programs", enabled=enabled) as progress:
        report = study.report(base, params, patch=not args.no_patch, progress=progress)
    report["seeds"] = seeds
    if args.json:
        common.print_json(report)
    else:
        print(ablate_text(base, report))
    return 0


def ablate_text(base: LMConfig, report: dict) -> str:
    """The `lm ablate` report as text: phase accuracy, effect maps, components, patching, verdict."""
    s = base.stride
    phases = [f"phi={p}" for p in range(s)]
    acc = report["phase_accuracy"]
    parts = [
        f"T={base.seq_len} P={base.pairs} layers={','.join(base.layer_kinds)} d={base.d_model} "
        f"H={base.heads} s={base.stride} {base.operator} steps={base.steps} "
        f"seeds={','.join(map(str, report['seeds']))}  (facts beyond the query's reach)",
        f"phase accuracy {common.sparkline(acc)}  " + " ".join(f"{a:.3f}" for a in acc),
    ]
    for layer, kind in enumerate(base.layer_kinds):
        rows = [[f"h{h}", *report["effect"][layer][h]] for h in range(base.heads)]
        parts.append(
            f"ablation drop, layer {layer} ({kind})\n" + common.table(["head", *phases], rows)
        )
    rows = [[c["name"], *c["drop"]] for c in report["components"]]
    parts.append("component drop\n" + common.table(["intervention", *phases], rows))
    patch = report["patch"]
    if patch is not None:
        rows = [[f"clean phi={p}", *patch["patched"][p]] for p in range(s)]
        parts.append(
            f"accuracy with the fact's entries (layer {patch['layer']}) patched from a world "
            "where its value sits at phase ...\n" + common.table(["", *phases], rows)
        )
    margins = report.get("margins")
    if margins is not None:
        gains = ", ".join(f"{g:.1f}" for g in np.mean(margins["gain"], axis=0))
        parts.append(f"effective gain per head (s x mean attention margin, over seeds): {gains}")
    parts.append(f"mechanism: {report['verdict']} -- {report['shown_by']}")
    return "\n\n".join(parts)


# ----------------------------------------------------------------------------- lm carry


def register_carry(verbs) -> None:
    """`weakspots lm carry`: the flags of `lm train`, plus `--cache`."""
    parser = verbs.add_parser(
        "carry",
        help="where a decoder reads a fact from: its own entries or those it was carried into",
        description=(
            "Train decoders (or load them from --cache), then hide the queried fact's own "
            "compressed entries (or, where windows overlap, those whose current or previous "
            "half holds it), the next one or two, or all entries within the local reach, "
            "and cut the local edges from later tokens to the fact (no carry); accuracy and "
            "its drop per value phase with 95% intervals (drops paired, seeds as clusters for "
            "accuracies). Every layer kind, DeepSeek-V4's included (sims.decoder.carry)."
        ),
        epilog=common.examples(
            "weakspots lm carry --layers 2 --local-window 16 --steps 1000 --seeds 2",
            "weakspots lm carry --design v4 --layers 2 --layout swa,csa --window 32 "
            "--local-window 32 --seeds 4 --json",
        ),
    )
    add_lm_flags(parser)
    add_cache_flag(parser)
    common.add_output_flags(parser)
    parser.set_defaults(handler=run_carry)


def run_carry(args: argparse.Namespace) -> int:
    base = lm_config(args)
    seeds = common.seed_list(args)
    results = trained_results(args, base, seeds, "lm carry: train")
    from weakspots.sims.decoder.carry import report as carry_report

    report = carry_report(base, results)
    if args.json:
        common.print_json(report)
    else:
        print(carry_text(base, report))
    return 0


def carry_text(base: LMConfig, report: dict) -> str:
    """The `lm carry` report as text: intact accuracy, then each test's accuracy and drop by phase."""
    s = base.stride
    phases = [f"phi={p}" for p in range(s)]
    rows = [["intact", *report["phase_accuracy"], ""]]
    for name, test in report["tests"].items():
        if not test["applies"]:
            rows.append([name, *["-"] * s, "n/a"])
            continue
        lo, hi = test["mean_drop_ci"]
        rows.append([name, *test["accuracy"], f"{test['mean_drop']:+.3f} [{lo:+.3f}, {hi:+.3f}]"])
    head = (
        f"T={base.seq_len} layers={','.join(base.layer_kinds)} s={base.stride} "
        f"local reach {report['local_reach']} seeds={','.join(map(str, report['seeds']))}"
    )
    return "\n\n".join([
        _phase_block(f"{head}: each seed on its own sequences, pooled", report["pooled"]),
        "carry tests (the shared sequences; accuracy by value phase, mean drop with 95% CI)\n"
        + common.table(["test", *phases, "drop"], rows),
    ])  # fmt: skip


# ----------------------------------------------------------------------------- lm prefetch

PREFETCH_STUDIES = ("amplifier", "footprint", "selection", "mechanism", "family")


def register_prefetch(verbs) -> None:
    """`weakspots lm prefetch`: train a size's decoders into the cache, one share at a time."""
    parser = verbs.add_parser(
        "prefetch",
        help="train the decoders of paper_repro's decoder studies into the cache, in shares",
        description=(
            "Train every decoder the decoder studies train at --size (full: the amplifier grid, "
            "the footprint and selection designs, the mechanism designs, the family grid) into "
            "the checkpoint cache ($WEAKSPOTS_LM_CACHE, else ~/.cache/weakspots/lm), or only "
            "share i of n (--slice i/n; inside a Slurm job array, the task's share). Shares are "
            "dealt by estimated cost and depend only on the size and the studies, so "
            "independent processes on a shared filesystem split the work; decoders already "
            "cached are not trained again. Then paper_repro.py --full with the same cache "
            "only evaluates (sims.experiments.decoder.prefetch)."
        ),
        epilog=common.examples(
            "weakspots lm prefetch --size full --dry-run",
            "weakspots lm prefetch --size full --slice 0/16 --studies amplifier",
            "WEAKSPOTS_LM_CACHE=/shared/lm sbatch --array=0-15 --wrap "
            "'weakspots lm prefetch --size full'",
        ),
    )
    parser.add_argument("--size", default="full", choices=("tiny", "full"),
                        help="the size of the studies (default: full)")  # fmt: skip
    parser.add_argument(
        "--studies",
        nargs="+",
        default=list(PREFETCH_STUDIES),
        choices=PREFETCH_STUDIES,
        help="the studies whose decoders to train (default: all)",
    )
    parser.add_argument("--slice", help="train share i of n (0-based), e.g. 3/16")
    parser.add_argument(
        "--dry-run", action="store_true", help="list the share's groups and whether cached"
    )
    common.add_output_flags(parser)
    parser.set_defaults(handler=run_prefetch)


def run_prefetch(args: argparse.Namespace) -> int:
    from weakspots.cli.sweep import share_of

    index, count = share_of(args, "lm prefetch")
    from weakspots.sims.experiments.decoder import prefetch
    from weakspots.sims.progress import Progress

    every = prefetch.groups(args.size, args.studies)
    mine = prefetch.shares(every, count)[index]
    if args.dry_run:
        rows = [dict(group=g.name, seeds=len(g.configs), cost=g.cost,
                     cached=prefetch.cached(g)) for g in mine]  # fmt: skip
    else:
        with Progress("lm prefetch", "groups", enabled=common.progress_enabled(args)) as progress:
            rows = prefetch.fill(mine, progress=progress)
    out = {"size": args.size, "slice": [index, count], "groups_in_size": len(every),
           "groups": rows}  # fmt: skip
    if args.json:
        common.print_json(out)
    else:
        head = f"lm prefetch --size {args.size}: share {index}/{count}, {len(mine)} of {len(every)} groups"
        keys = ("group", "seeds", "cached", "cost" if args.dry_run else "seconds")
        table = [[r[k] if not isinstance(r[k], float) else f"{r[k]:.3g}" for k in keys]
                 for r in rows]  # fmt: skip
        print(head + "\n" + common.table(list(keys), table))
    return 0
