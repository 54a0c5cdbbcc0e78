"""What is studied: configs, the retrieval task, compression operators, the model, losses, phase metrics.

Importing it changes no jax setting: where the project needs 64-bit types it turns them on
inside its own functions (`idealized.precision`).
"""
