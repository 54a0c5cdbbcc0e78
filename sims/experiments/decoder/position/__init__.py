"""The position study: accuracy by the value's position in the decoder (`lm_position`), and
the recorded `lm train` reports of its design and dense control (`runs/`, cited by
docs/decoder_runs.md)."""
