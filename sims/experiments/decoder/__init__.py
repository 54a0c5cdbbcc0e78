"""Experiments of the decoders trained from scratch, one package per study (`ablation`,
`amplifier`, `family`, `footprint`, `position`: each its driver, its experiments and its
recorded `runs/`), and `prefetch`, which trains what the studies need ahead of a full run:
see DEVELOPERS.md."""
