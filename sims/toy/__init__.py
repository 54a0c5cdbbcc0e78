"""toy: see DEVELOPERS.md."""
