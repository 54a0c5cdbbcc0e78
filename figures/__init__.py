"""One module per figure: read results, overlay theory, draw."""
