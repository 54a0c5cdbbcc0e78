"""Baselines that `weakspots bench` measures the project against; each module also runs as a script.

* `naive_trainer`: the trainer a user writes first (one model, Python loop, real keys).
* `rng_limit`: only the random numbers one exact training step needs, same generator.
* `scipy_flow`: the reduced gradient flow with `scipy.integrate.solve_ivp` (LSODA).
"""
