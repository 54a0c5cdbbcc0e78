"""The decoders a size of the decoder studies trains, trained in shares into the checkpoint cache.

`paper_repro.py --full` trains its decoders through `sims.decoder.checkpoint.trained`, which
loads what the cache (`$WEAKSPOTS_LM_CACHE`) holds. Filling that cache first, in independent
shares (processes, Slurm array tasks, hosts on a shared filesystem), splits the costly part
of the run; `paper_repro.py --full` with the same cache then only evaluates.

A *group* is the configs one study trains together (one design's seeds, one
`checkpoint.trained` call): `groups(size)` lists every study's, in a fixed order. `shares`
deals them out by their estimated cost (`cost`: steps x seeds x T^2, the attention's
growth), largest first, each to the least loaded share, so shares take similar time and
depend only on the size and the studies. `fill` trains one share.

Studies (`STUDIES`): `amplifier` (`sims.experiments.decoder.amplifier.study`), `footprint` and `selection`
(`sims.experiments.decoder.footprint.study`), `mechanism` (`sims.experiments.decoder.ablation.study`, the designs of the mechanism
table and the toy comparison) and `family` (`sims.experiments.decoder.family.study`, the grid). A study whose
size reads recordings trains nothing there.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from weakspots.idealized.decoder.config import LMConfig
from weakspots.sims.decoder.checkpoint import cache_directory, load, trained
from weakspots.sims.experiments.decoder.ablation import study
from weakspots.sims.experiments.decoder.amplifier import study as amplifier
from weakspots.sims.experiments.decoder.family import study as family
from weakspots.sims.experiments.decoder.footprint import study as footprint
from weakspots.sims.progress import Progress


@dataclasses.dataclass(frozen=True)
class Group:
    """The configs one study trains together, and its name (`study:design[...]`)."""

    name: str
    configs: tuple[LMConfig, ...]

    @property
    def cost(self) -> float:
        """Estimated training work: steps x seeds x T^2 (the attention's growth in T)."""
        c = self.configs[0]
        return float(c.steps * len(self.configs) * c.seq_len**2)


def _seeded(config: LMConfig, seeds: int) -> tuple[LMConfig, ...]:
    return tuple(config.replace(seed=s) for s in range(seeds))


def _amplifier(size: str) -> list[Group]:
    if amplifier.SIZES[size]["source"] != "train":
        return []
    return [
        Group(f"amplifier:{arm}:{design}:T{seq_len}",
              _seeded(amplifier.design_config(size, arm, design, seq_len),
                      amplifier.seeds_of(size, design, arm)))
        for arm, design, seq_len in amplifier.cells(size)
    ]  # fmt: skip


def _footprint(name: str) -> Callable[[str], list[Group]]:
    def groups(size: str) -> list[Group]:
        spec = footprint.SIZES[size]
        if spec["source"] != "train":
            return []
        designs = [d for d in footprint.FAMILIES[name] if d in spec.get("designs", (d,))]
        return [
            Group(f"{name}:{d}", _seeded(footprint.design_config(name, d, size), spec["seeds"]))
            for d in designs
        ]

    return groups


def _mechanism(size: str) -> list[Group]:
    if size != "full":  # tiny trains uncached; quick reads the recordings
        return []
    return [
        Group(f"mechanism:{name}", _seeded(study.config(name, size), study.seeds_of(size)))
        for name in study.STUDY_DESIGNS
    ]


def _family(size: str) -> list[Group]:
    if size != "full":  # only full caches the grid (`family.run`)
        return []
    out: dict[LMConfig, list[LMConfig]] = {}
    for config in family.configs(size):
        out.setdefault(config.replace(seed=0), []).append(config)
    return [
        Group(f"family:{c.layout or c.operator}:s{c.stride}:T{c.seq_len}", tuple(v))
        for c, v in out.items()
    ]


STUDIES: dict[str, Callable[[str], list[Group]]] = {
    "amplifier": _amplifier,
    "footprint": _footprint("footprint"),
    "selection": _footprint("selection"),
    "mechanism": _mechanism,
    "family": _family,
}
"""Study name -> its groups at a size."""


def groups(size: str, studies: Sequence[str] = tuple(STUDIES)) -> list[Group]:
    """Every group `studies` train at `size`, in a fixed order (ValueError: unknown study)."""
    unknown = [s for s in studies if s not in STUDIES]
    if unknown:
        raise ValueError(f"unknown study {unknown[0]!r}; the studies: {', '.join(STUDIES)}")
    return [g for s in studies for g in STUDIES[s](size)]


def shares(all_groups: Sequence[Group], count: int) -> list[list[Group]]:
    """`all_groups` dealt into `count` shares: largest estimated cost first, each to the share
    with the least so far (ties: the lowest index). Depends only on the groups."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    out: list[list[Group]] = [[] for _ in range(count)]
    load_of = [0.0] * count
    order = sorted(range(len(all_groups)), key=lambda i: (-all_groups[i].cost, i))
    for i in order:
        j = min(range(count), key=lambda k: (load_of[k], k))
        out[j].append(all_groups[i])
        load_of[j] += all_groups[i].cost
    return out


def cached(group: Group, directory=True) -> bool:
    """Whether every config of `group` is in the checkpoint cache."""
    folder = cache_directory() if directory is True else directory
    return all(load(folder, c) is not None for c in group.configs)


def fill(mine: Sequence[Group], *, directory=True, progress: Progress | None = None) -> list[dict]:
    """Train (or find in the cache) every group of `mine`; per group its name, configs, whether
    it was already cached and the wall seconds spent."""
    if progress is not None:
        progress.plan(len(mine))
    out = []
    for group in mine:
        start = time.perf_counter()
        was = cached(group, directory)
        if not was:  # a cached group was just read whole: no second load
            trained(list(group.configs), directory=directory)
        out.append(dict(group=group.name, seeds=len(group.configs), cached=was,
                        seconds=time.perf_counter() - start))  # fmt: skip
        if progress is not None:
            progress.update(1, warmup=not was)
    return out
