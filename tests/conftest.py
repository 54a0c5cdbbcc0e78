import os

os.environ.setdefault("MPLBACKEND", "Agg")

import jax  # noqa: E402

from weakspots import idealized  # noqa: E402,F401  (precision policy)

# Silent broadcasting fails loudly (as in equinox's own test-suite).
jax.config.update("jax_numpy_rank_promotion", "raise")
