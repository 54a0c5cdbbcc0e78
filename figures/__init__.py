"""One module per figure: read results, overlay theory, draw.

Each `figures/<name>.py` exposes `make(results, predictions) -> matplotlib.figure.Figure`
for the `results`/`predictions` of `sims.experiments.run_<name>`/`predict_<name>`;
`paper_repro.py` saves them as PNG and PDF. `figures.style` holds the shared look.
"""
