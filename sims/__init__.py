"""How things are run: training, gradient flow, sweeps, interventions, the store (the command line above them is `weakspots.cli`)."""
