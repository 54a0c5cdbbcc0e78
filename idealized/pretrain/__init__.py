"""Pretraining as the paper does it: the Qwen3-shaped backbone, its attention kinds, the config."""
