"""One module per figure: read results, overlay theory, draw.

Each `figures/<name>.py` exposes `make(results, predictions) -> matplotlib.figure.Figure`
for the results and predictions of the experiment named `<name>`
(`sims.experiments.<family>.<name>`), and its two-line `CAPTION`; `figures.style` holds the
shared look. `DRAWINGS` maps the name of every experiment that sims marks `drawn=True` to
the module of that name here, imported on first use: sims never imports matplotlib, so a
figure is found by its experiment's name in the layer that sees both, and a new figure is
its module alone (no list to extend).
"""

import importlib


def _drawings() -> dict:
    from weakspots.sims.experiments import EXPERIMENTS

    return {e.name: importlib.import_module(f"{__name__}.{e.name}") for e in EXPERIMENTS if e.drawn}


def __getattr__(name: str):
    if name == "DRAWINGS":  # built once, on first use (it imports every experiment)
        drawings = globals()["DRAWINGS"] = _drawings()
        return drawings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
