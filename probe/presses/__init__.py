"""The project's own KV-cache presses (a new one is one file and one line in `PRESSES`).

They follow kvpress's contract (`with press(model):` around the prefill; `probe.press`
applies either kind) but need neither kvpress nor a transformers line of its own.
"""

from __future__ import annotations

from .base import AbstractPress as AbstractPress
from .block_selection import BlockSelectionPress as BlockSelectionPress
from .planted import PlantedPress as PlantedPress

PRESSES: dict[str, type[AbstractPress]] = {
    press.name: press for press in (BlockSelectionPress, PlantedPress)
}

__all__ = ["PRESSES", "AbstractPress", "BlockSelectionPress", "PlantedPress"]
