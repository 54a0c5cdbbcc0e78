"""How things are run: training, gradient flow, sweeps, interventions, the store, the command line."""
