"""Experiments of the paper's idealised induction model (PAPER.md §5; docs/induction.md)."""
