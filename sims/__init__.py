"""How things are run: training, gradient flow, sweeps, interventions, the store, the command line."""

import weakspots.idealized as _idealized  # noqa: F401  (sets the precision policy)
