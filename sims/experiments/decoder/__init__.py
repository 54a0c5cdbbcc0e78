"""Experiments of the decoders trained from scratch: see DEVELOPERS.md."""
