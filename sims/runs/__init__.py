"""runs: see DEVELOPERS.md."""
