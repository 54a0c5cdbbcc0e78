"""Does the installed XLA:CPU crash on a rank-7 reduction of a product with one unit axis?

The smallest program found that segfaults at run time in XLA:CPU's YNNPACK fusions
(jaxlib 0.10.2; the crash is in the fusion's transpose, `slinky::fuse_contiguous_dims`):

    k = jnp.ones((2, 1, 4, 8, 8, 8, 8), jnp.float32)
    jax.jit(lambda k: jnp.sum(jnp.exp(k) * k, axis=-2))(k)

`deepseek_v4`'s window pool (`sum_p e[p] kv[p]`, `idealized.deepseek_v4`) has this form;
per sequence and head it is rank 3 `(C, s, hd)`, so a decoder batch makes it rank 5
`(B, H, C, s, hd)`, and two nested vmaps (worlds and runs, one of them of size 1) made it
rank 7: `weakspots lm ablate` of every `deepseek_v4` decoder crashed. The same program
runs without the unit axis, with two unit axes, at rank 6, with the product reduced
without the `exp`, and with YNNPACK fusions off
(`XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=`). `sims.decoder.interventions` keeps
such intermediates at rank 6 (one vmap axis of worlds times runs).

Each case runs in its own process, so a crash is reported rather than suffered:

    python -m weakspots.benchmarks.xla_rank7_reduce
"""

from __future__ import annotations

import os
import subprocess
import sys

PROGRAM = """
import jax, jax.numpy as jnp
k = jnp.ones({shape}, jnp.float32)
out = jax.jit(lambda k: {body})(k)
print(float(out.sum()))
"""
PRODUCT = "jnp.sum(jnp.exp(k) * k, axis=-2)"
CASES = {  # name -> (shape, body, extra XLA flag)
    "rank 7, one unit axis": ((2, 1, 4, 8, 8, 8, 8), PRODUCT, ""),
    "rank 6 (the unit axis merged)": ((2, 4, 8, 8, 8, 8), PRODUCT, ""),
    "rank 7, no unit axis": ((2, 2, 4, 8, 8, 8, 8), PRODUCT, ""),
    "rank 7, two unit axes": ((1, 1, 4, 8, 8, 8, 8), PRODUCT, ""),
    "rank 7, one unit axis, k * k": ((2, 1, 4, 8, 8, 8, 8), "jnp.sum(k * k, axis=-2)", ""),
    "rank 7, one unit axis, YNNPACK off": (
        (2, 1, 4, 8, 8, 8, 8),
        PRODUCT,
        "--xla_cpu_experimental_ynn_fusion_type=",
    ),
}


def run_case(shape: tuple[int, ...], body: str, flag: str) -> str:
    """`ok <sum>`, or how the process ended (`crashed: signal 11`, `failed: <last line>`)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flag}".strip()
    code = PROGRAM.format(shape=shape, body=body)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    if done.returncode < 0:
        return f"crashed: signal {-done.returncode}"
    if done.returncode:
        lines = done.stderr.strip().splitlines()
        return f"failed: {lines[-1] if lines else done.returncode}"
    return f"ok {done.stdout.strip()}"


def main() -> int:
    import jaxlib

    print(f"jaxlib {jaxlib.__version__}")
    for name, case in CASES.items():
        print(f"{name:40s} {run_case(*case)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
