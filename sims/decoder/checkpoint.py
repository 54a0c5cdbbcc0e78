"""Trained decoders kept on disk by config, so interventions and figures need not retrain them.

A checkpoint is one `.npz` file per `LMConfig` (its content hash, `sims.store.config_hash`):
the parameter state's leaves by path, the per-step training loss, the held-out history and
the final evaluation outcomes, with the config as JSON beside them. `trained(configs)`
loads what is there and trains the rest with `sims.decoder.train.train_many` (one compile per
structure), then saves it. The directory is `$WEAKSPOTS_LM_CACHE`, else
`~/.cache/weakspots/lm`; `directory=None` in a call turns the cache off.

A stored file is used only when its config matches field for field; a file that cannot be
read is ignored (and retrained), so a damaged cache costs time, never a wrong result. A file
whose outcomes were drawn otherwise than `evaluate.EVALUATION` (each run on its own sequences)
has them scored again from its parameters on load.
"""

from __future__ import annotations

import json
import os
import pathlib
import zipfile
from collections.abc import Sequence

import jax
import numpy as np
from flax import nnx

from weakspots.idealized.decoder.config import LMConfig
from weakspots.idealized.decoder.model import Decoder
from weakspots.sims.decoder.evaluate import EVALUATION, evaluate_many
from weakspots.sims.decoder.train import LMHistory, LMResult, train_many
from weakspots.sims.progress import Progress
from weakspots.sims.store import config_hash

DEFAULT = pathlib.Path("~/.cache/weakspots/lm")
_HISTORY = ("steps", "loss", "eval_loss", "eval_accuracy")


def cache_directory() -> pathlib.Path:
    """`$WEAKSPOTS_LM_CACHE` if set, else `~/.cache/weakspots/lm` (expanded)."""
    return pathlib.Path(os.environ.get("WEAKSPOTS_LM_CACHE", DEFAULT)).expanduser()


def _path(directory: pathlib.Path, config: LMConfig) -> pathlib.Path:
    return directory / f"{config_hash(config.asdict())}.npz"


def _flat(params: nnx.State) -> dict[str, np.ndarray]:
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    return {"param:" + jax.tree_util.keystr(path): np.asarray(x) for path, x in leaves}


def _template(config: LMConfig) -> nnx.State:
    return nnx.split(nnx.eval_shape(lambda: Decoder(config.decoder, rngs=nnx.Rngs(0))))[1]


def save(directory: pathlib.Path, result: LMResult) -> pathlib.Path:
    """Write one run; returns the file. Written to a temporary name, then renamed (atomic)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = _path(directory, result.config)
    arrays = _flat(result.params)
    arrays.update({f"history:{k}": np.asarray(getattr(result.history, k)) for k in _HISTORY})
    arrays["step_loss"] = np.asarray(result.step_loss)
    arrays["outcomes"] = np.asarray(result.outcomes)
    meta = {
        "config": result.config.asdict(),
        "wall_seconds": result.wall_seconds,
        "tokens_per_second": result.tokens_per_second,
        "evaluation": EVALUATION,
    }
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    temporary = path.with_suffix(".tmp.npz")
    np.savez(temporary, **arrays)
    temporary.replace(path)
    return path


def load(directory: pathlib.Path, config: LMConfig) -> LMResult | None:
    """The stored run of exactly `config`, or None (absent, unreadable or another config)."""
    path = _path(directory, config)
    if not path.exists():
        return None
    try:
        with np.load(path) as data:
            meta = json.loads(bytes(data["meta"]).decode())
            if meta["config"] != json.loads(json.dumps(config.asdict())):
                return None
            template = _template(config)
            paths = jax.tree_util.tree_flatten_with_path(template)[0]
            leaves = [np.asarray(data["param:" + jax.tree_util.keystr(p)]) for p, _ in paths]
            for (_, shape), leaf in zip(paths, leaves, strict=True):
                if leaf.shape != shape.shape:
                    return None
            params = jax.tree.unflatten(jax.tree.structure(template), leaves)
            history = LMHistory(**{k: np.asarray(data[f"history:{k}"]) for k in _HISTORY})
            params = jax.tree.map(jax.numpy.asarray, params)
            outcomes = np.asarray(data["outcomes"])
            if meta.get("evaluation") != EVALUATION:  # scored on the shared set: score again
                stacked = jax.tree.map(lambda x: x[None], params)
                outcomes = evaluate_many(config, stacked, seeds=[config.seed])[0]
            return LMResult(
                config=config,
                history=history,
                params=params,
                step_loss=np.asarray(data["step_loss"]),
                outcomes=outcomes,
                wall_seconds=float(meta["wall_seconds"]),
                tokens_per_second=float(meta["tokens_per_second"]),
            )
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, json.JSONDecodeError):
        return None


def trained(
    configs: Sequence[LMConfig],
    *,
    directory: pathlib.Path | str | None | bool = True,
    progress: Progress | None = None,
) -> list[LMResult]:
    """Every config trained: loaded from the cache where stored, the rest trained and saved.

    `directory`: True for `cache_directory()`, a path, or None/False for no cache.
    """
    if directory is True:
        directory = cache_directory()
    directory = pathlib.Path(directory) if directory else None
    results = [load(directory, c) if directory else None for c in configs]
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:
        fresh = train_many([configs[i] for i in missing], progress=progress)
        for i, result in zip(missing, fresh, strict=True):
            results[i] = result
            if directory:
                save(directory, result)
    return results
