"""The command line's argparse pieces; standard library only (and `weakspots.errors`), so
`weakspots --help` is fast."""

from __future__ import annotations

import argparse
import difflib
import re
import textwrap

from weakspots.errors import UsageError as UsageError  # its home: the errors every layer raises


class HelpFormatter(argparse.HelpFormatter):
    """Shows each flag's default after its help; keeps the examples (`examples`) as written.

    A default that says nothing (None, False, an empty string) is left out; a list or tuple
    shows as the values one would type (`(default: 4 8)`, not `(4, 8)`).
    """

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        blocks = []
        for block in text.split("\n\n"):
            if block.startswith("examples:"):
                blocks.append(textwrap.indent(block, indent))
            else:
                blocks.append(super()._fill_text(block, width, indent))
        return "\n\n".join(blocks)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or "%(default)" in text
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or default == ""
        ):
            return text
        if isinstance(default, list | tuple):
            shown = " ".join(str(v) for v in default).replace("%", "%%")
            return f"{text} (default: {shown})" if shown else text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2, from the verb that
    was given (`weakspots train: error: ...`), and an unknown flag comes with the nearest
    known one; help shows defaults."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:  # refused here, by the innermost verb, rather than by `weakspots`
            self.error(f"unrecognized arguments: {' '.join(extras)}{self.suggestion(extras)}")
        return namespace, extras

    def suggestion(self, extras: list[str]) -> str:
        """`(did you mean --steps?)` for the first unknown flag close to one of this verb's."""
        known = [s for a in self._actions for s in a.option_strings if s.startswith("--")]
        for extra in extras:
            if extra.startswith("--"):
                near = difflib.get_close_matches(extra.split("=", 1)[0], known, n=1, cutoff=0.6)
                if near:
                    return f" (did you mean {near[0]}?)"
        return ""

    def error(self, message: str):
        wrong = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if wrong:  # a mistyped verb or choice: the nearest one
            choices = re.findall(r"'([^']*)'", wrong.group(2))
            near = difflib.get_close_matches(wrong.group(1), choices, n=1, cutoff=0.6)
            message += f" (did you mean {near[0]}?)" if near else ""
        self.exit(2, f"{self.prog}: error: {message}\n")
