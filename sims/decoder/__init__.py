"""Decoders with compressed attention: `train` (many runs at once), `evaluate` (the per-phase protocol)."""
