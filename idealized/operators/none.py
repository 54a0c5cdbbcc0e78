"""`none`: every token is its own entry (stride 1), the decoder's dense control."""

from __future__ import annotations

from typing import ClassVar

from weakspots.idealized.operators.base import DECODER, AbstractOperator
from weakspots.idealized.types import CompressedKeys, Keys


class NoPool(AbstractOperator):
    """Standard causal attention in the decoder; the toy has no such operator."""

    name: ClassVar[str] = "none"
    families: ClassVar = (DECODER,)
    dense: ClassVar[bool] = True

    @classmethod
    def init(cls, key, config, init_scale, dtype):
        raise NotImplementedError("none is the decoder's dense control")

    def __call__(self, keys: Keys) -> CompressedKeys:
        raise NotImplementedError("none is the decoder's dense control")

    @classmethod
    def decoder_pool(cls, params, x, keys, values, *, stride, overlap):
        return keys, values
