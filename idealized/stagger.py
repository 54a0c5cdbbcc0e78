"""Staggered window boundaries shared by the toy, the decoder and theory."""


def stagger_offsets(stride: int, heads: int) -> tuple[int, ...]:
    """Head h's chunk-boundary shift `h s // H` in tokens (`--stagger`), one per head."""
    return tuple(h * stride // heads for h in range(heads))
