"""Checkpoints of pretraining runs: a JSON config beside npz arrays keyed by pytree path.

A run's directory holds `config.json` (the `PretrainConfig`, vocab resolved),
`state.npz` (parameters and optimizer state of every seed, stacked: what resuming reads),
`history.json` (loss curves, tokens per second) and one `seed-<s>/` directory per seed
(`config.json` with `seed = s, seeds = 1`, `params.npz`): what `load` reads and the lookup
evaluates. Arrays are stored bit for bit; loading checks every path against the model the
config builds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from weakspots.idealized.pretrain.config import PretrainConfig
from weakspots.idealized.pretrain.model import Backbone

CONFIG, STATE, HISTORY, PARAMS = "config.json", "state.npz", "history.json", "params.npz"


def seed_dir(out_dir: str | os.PathLike, seed: int) -> Path:
    return Path(out_dir) / f"seed-{seed}"


def write_json(path: Path, obj) -> None:
    """Write atomically (a reader never sees half a file)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    os.replace(tmp, path)


def read_config(directory: str | os.PathLike) -> PretrainConfig:
    return PretrainConfig(**json.loads((Path(directory) / CONFIG).read_text()))


def save_tree(path: Path, tree) -> None:
    """Every leaf of `tree` under its `jax.tree_util.keystr` path, as numpy, atomically."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    arrays = {jax.tree_util.keystr(p): np.asarray(v) for p, v in leaves}
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def load_tree(path: Path, like):
    """The tree shaped as `like` (arrays or `jax.ShapeDtypeStruct`s) with the stored leaves."""
    with np.load(path) as stored:
        leaves, treedef = jax.tree_util.tree_flatten_with_path(like)
        keys = [jax.tree_util.keystr(p) for p, _ in leaves]
        missing = sorted(set(keys) ^ set(stored.files))
        if missing:
            raise ValueError(f"{path}: stored arrays do not match the model ({missing[:3]} ...)")
        values = []
        for key, (_, leaf) in zip(keys, leaves, strict=True):
            value = stored[key]
            if value.shape != tuple(leaf.shape) or value.dtype != leaf.dtype:
                raise ValueError(f"{path}: {key} is {value.dtype}{value.shape}, expected "
                                 f"{leaf.dtype}{tuple(leaf.shape)}")  # fmt: skip
            values.append(value)
    return jax.tree_util.tree_unflatten(treedef, values)


def abstract_params(config: PretrainConfig) -> nnx.State:
    """The parameter state's shapes and dtypes, without computing it."""
    abstract = nnx.eval_shape(lambda: Backbone(config, rngs=nnx.Rngs(0)))
    return nnx.split(abstract)[1]


def save_seed(out_dir: str | os.PathLike, config: PretrainConfig, params: nnx.State) -> Path:
    """One seed's evaluable checkpoint (`config` has `seeds = 1`)."""
    directory = seed_dir(out_dir, config.seed)
    directory.mkdir(parents=True, exist_ok=True)
    save_tree(directory / PARAMS, params)
    write_json(directory / CONFIG, config.asdict())
    return directory


def load(directory: str | os.PathLike) -> tuple[PretrainConfig, nnx.State]:
    """`(config, params)` of one seed's checkpoint directory (`seed-<s>/` of a run)."""
    directory = Path(directory)
    if not (directory / PARAMS).exists():
        seeds = sorted(p.name for p in directory.glob("seed-*"))
        hint = f"; it holds {', '.join(seeds)}" if seeds else ""
        raise FileNotFoundError(f"{directory} is not a seed's checkpoint (no {PARAMS}){hint}")
    config = read_config(directory)
    return config, load_tree(directory / PARAMS, abstract_params(config))


def seed_checkpoints(out_dir: str | os.PathLike) -> list[Path]:
    """The seed directories of a run, in seed order (none for a seed's own directory)."""
    if (Path(out_dir) / PARAMS).exists():
        return []
    config = read_config(out_dir)
    return [seed_dir(out_dir, s) for s in range(config.seed, config.seed + config.seeds)]
