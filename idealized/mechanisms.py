"""The idealised models beside the toy (footprint, selection), found from their configs."""

from __future__ import annotations

from weakspots.idealized import footprint, selection


def model_module(config):
    """`idealized.footprint` or `idealized.selection` for their train or flow configs, else
    None (the toy's `TrainConfig` / `FlowConfig`)."""
    if footprint.is_footprint(config):
        return footprint
    if selection.is_selection(config):
        return selection
    return None
