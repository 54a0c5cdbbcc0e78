"""What is studied: configs, the retrieval task, compression operators, the model, losses, phase metrics."""

import jax

# Theory and gradient flows are integrated in float64; the trainer asks for float32 explicitly.
jax.config.update("jax_enable_x64", True)
