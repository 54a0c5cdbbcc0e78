"""Every flag of every verb, as recorded in `tests/data/cli_flags.json`: a change to any
flag's name, destination, default, type, choices, nargs or requiredness shows here.

After an intended change to the command line, record it again with
`python tests/cli/test_cli_flags_recorded.py` and review the diff.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from weakspots.cli import build_parser

RECORDED = Path(__file__).resolve().parents[1] / "data" / "cli_flags.json"


def _plain(value):
    """A default as JSON: numbers, strings, booleans and None as themselves (inf and nan as
    strings), lists and tuples as lists, anything else by its type and repr."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is argparse.SUPPRESS:
        return "==SUPPRESS=="
    return {"type": type(value).__name__, "repr": repr(value)}


def _action(action: argparse.Action) -> dict:
    kind = getattr(action.type, "__name__", None) if action.type is not None else None
    return {
        "flags": list(action.option_strings),
        "dest": action.dest,
        "action": type(action).__name__,
        "default": _plain(action.default),
        "type": kind if kind is not None else (repr(action.type) if action.type else None),
        "choices": None if action.choices is None else [_plain(c) for c in action.choices],
        "nargs": action.nargs,
        "required": action.required,
        "const": _plain(action.const),
    }


def flags(parser: argparse.ArgumentParser, prefix: str = "weakspots") -> dict[str, list[dict]]:
    """Each (sub)command's arguments by its full name (`weakspots lm train`), walking the
    subcommands; a subparsers action is recorded by its destination and the names it takes."""
    out = {prefix: []}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            names = list(action.choices)
            out[prefix].append(
                {"subcommands": names, "dest": action.dest, "required": action.required}
            )
            for name, sub in action.choices.items():
                out.update(flags(sub, f"{prefix} {name}"))
        else:
            out[prefix].append(_action(action))
    return out


def live() -> dict[str, list[dict]]:
    """The live parser's flags (every verb imported), as JSON would read them back."""
    return json.loads(json.dumps(flags(build_parser())))


def test_every_flag_of_every_verb_is_as_recorded():
    recorded = json.loads(RECORDED.read_text())
    now = live()
    assert sorted(now) == sorted(recorded), "the verbs differ from the recorded list"
    for command in recorded:
        assert now[command] == recorded[command], f"`{command}`'s flags differ from the record"


def test_the_record_covers_every_verb_and_subcommand():
    recorded = json.loads(RECORDED.read_text())
    for command in (
        "weakspots train",
        "weakspots predict",
        "weakspots probe",
        "weakspots lm train",
        "weakspots lm pretrain",
        "weakspots lm lookup",
        "weakspots lm ablate",
    ):
        assert command in recorded
    assert any("--steps" in a.get("flags", []) for a in recorded["weakspots train"])


if __name__ == "__main__":
    RECORDED.write_text(json.dumps(live(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {RECORDED}")
