"""Closed-form and semi-analytic predictions, and the reduced gradient-flow loss."""

import idealized as _idealized  # noqa: F401  (sets the precision policy)
