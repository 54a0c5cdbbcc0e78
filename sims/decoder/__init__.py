"""The decoders' engine and surgery: `train` (many runs at once), `evaluate` (the per-phase
protocol), `checkpoint`, `sweep`; `edits`, `interventions` and `carry` take trained decoders
apart. The studies that use them, with their designs and recordings, are
`sims.experiments.decoder.<study>`."""
