"""Experiments of the toy model and of the idealised §9 models: see DEVELOPERS.md."""
