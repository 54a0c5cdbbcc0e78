"""The errors every layer raises for bad input, at the bottom of the package (standard
library only): the command line turns either into one line naming the flag and exit code 2.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """An invalid config value; `flag` names the command-line flag it came from.

    `str(error)` is `"--flag: message"`; `message` alone is what is wrong (it quotes the
    value given), for callers that name the field another way (a sweep spec's key).
    """

    def __init__(self, field: str, message: str):
        self.field = field
        self.flag = "--" + field.replace("_", "-")
        self.message = message
        super().__init__(f"{self.flag}: {message}")


class UsageError(ValueError):
    """Bad input that no config field owns; the message names the flag."""
