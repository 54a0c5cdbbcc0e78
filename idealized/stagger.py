"""Evenly spread chunk-boundary shifts, shared by the toy, the decoder and theory."""


def stagger_offsets(stride: int, count: int) -> tuple[int, ...]:
    """The shifts `k s // count` in tokens, k < count: head h's chunk boundary under `--stagger`
    (count = heads H), or chunking k's of an offset ensemble (count = K)."""
    return tuple(k * stride // count for k in range(count))
