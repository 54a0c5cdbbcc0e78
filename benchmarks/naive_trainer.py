"""The naive baseline: the trainer a user writes first.

One model at a time (canonical model: softmax pooling, fixed gain, mse, SGD), a jitted
step called from a Python loop, and the real keys `x[c, j] ~ N(0, I/d)` (`B N s d`
numbers) drawn with `jax.random.normal` every step. No vmap over runs, no scan, no
inner-product trick. `weakspots bench` divides the project trainer's model-steps per
second by this one's (`speedup_vs_naive_loop`).

Run as a script to time it alone:

    python benchmarks/naive_trainer.py --steps 10
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp


def naive_loss(pooling_logits, keys, query, target, gain):
    """Mean over needles of `|softmax_c(z) - onehot(c*)|^2`, `z[c] = gain q . sum_j alpha_j x[c, j]`.

    pooling_logits (s,); keys (B, N, s, d); query (B, d); target (B,); gain scalar.
    """
    alpha = jax.nn.softmax(pooling_logits)
    compressed = jnp.einsum("j,bcjd->bcd", alpha, keys)
    logits = gain * jnp.einsum("bd,bcd->bc", query, compressed)
    probs = jax.nn.softmax(logits, axis=-1)
    onehot = jax.nn.one_hot(target, keys.shape[1], dtype=probs.dtype)
    return jnp.mean(jnp.sum((probs - onehot) ** 2, axis=-1))


def naive_batch(key, batch, chunks, stride, dim):
    """A fresh batch of needles with real keys: `(keys, query, target)`."""
    k_target, k_phase, k_keys = jax.random.split(key, 3)
    target = jax.random.randint(k_target, (batch,), 0, chunks)
    phase = jax.random.randint(k_phase, (batch,), 0, stride)
    keys = jax.random.normal(k_keys, (batch, chunks, stride, dim), jnp.float32) / jnp.sqrt(
        jnp.float32(dim)
    )
    query = keys[jnp.arange(batch), target, phase]
    return keys, query, target


def make_step(batch=256, chunks=64, stride=8, dim=64, lr=2.0, gain=16.0):
    """The jitted SGD step `(pooling_logits, key) -> (pooling_logits, key, loss)`."""

    @jax.jit
    def step(pooling_logits, key):
        key, k_batch = jax.random.split(key)
        keys, query, target = naive_batch(k_batch, batch, chunks, stride, dim)
        loss, grad = jax.value_and_grad(naive_loss)(pooling_logits, keys, query, target, gain)
        return pooling_logits - lr * grad, key, loss

    return step


def train(seed=0, steps=600, init_scale=0.01, step=None, **config):
    """Train one model for `steps` steps from a Python loop; returns (pooling_logits, losses)."""
    step = make_step(**config) if step is None else step
    key = jax.random.key(seed)
    k_init, key = jax.random.split(key)
    stride = config.get("stride", 8)
    pooling_logits = init_scale * jax.random.normal(k_init, (stride,), jnp.float32)
    losses = []
    for _ in range(steps):
        pooling_logits, key, loss = step(pooling_logits, key)
        losses.append(loss)
    return pooling_logits, jnp.stack(losses)


def model_steps_per_second(steps=10, step=None, **config) -> float:
    """Model-steps per second of `train` (one model), compilation excluded."""
    step = make_step(**config) if step is None else step
    jax.block_until_ready(train(steps=1, step=step, **config))
    start = time.perf_counter()
    jax.block_until_ready(train(steps=steps, step=step, **config))
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    rate = model_steps_per_second(args.steps)
    print(f"naive trainer: {rate:.2f} model-steps/s (s=8, N=64, d=64, H=1, batch 256)")


if __name__ == "__main__":
    main()
