"""Experiments of the decoders trained from scratch, one package per study (`ablation`,
`amplifier`, `family`, `footprint`, `position`: each its driver, its experiments and its
recorded `runs/`), and `prefetch`, which trains what the studies need ahead of a full run:
see DEVELOPERS.md."""

# The packages every decoder study trains and measures with (the model and its layer kinds;
# the trainer, evaluation and surgery): their digest joins each study's store key.
ENGINE = ("weakspots.idealized.decoder", "weakspots.sims.decoder")
