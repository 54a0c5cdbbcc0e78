"""decoder: see DEVELOPERS.md."""
