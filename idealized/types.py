"""Array shapes used in signatures, defined once (as diffrax's `_custom_types.py`).

Letters: B batch, N chunks, s stride (phases), d key dimension, H heads, T times.
"""

from jaxtyping import Array, Float, Int

Keys = Float[Array, "N s d"]
"""One context's keys, chunk-major: `keys[c, j]` is the key at chunk c, phase j."""
Gram = Float[Array, "N s"]
"""Inner products of the query with every key: `gram[c, j] = q . keys[c, j]`."""
Query = Float[Array, " d"]
CompressedKeys = Float[Array, "H N d"]
Logits = Float[Array, "H N"]
PoolingWeights = Float[Array, "H s"]
PhaseAccuracy = Float[Array, " s"]
Labels = Int[Array, " B"]
