"""Pretraining runs: the trainer, checkpoints, the sweep of designs."""
