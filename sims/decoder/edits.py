"""Interventions on a trained decoder as small values you apply to it.

An edit is a frozen dataclass naming what it changes (a layer, a head, ...); `edit.apply(model)`
returns an edited copy of an `idealized.decoder.model.Decoder` and leaves `model` as it was (as
penzai's `toolshed/model_rewiring.py` inserts a small layer rather than branching inside the
model). The decoder's forward pass knows nothing of edits: each one changes parameter values,
switches a branch of one attention layer off, or puts a compressor in front of the layer's own.

* parameter edits (`changes_program = False`, so many of them run as "worlds" of one compiled
  program): `AblateHead` zeroes one head's rows of a layer's output projection (its
  contribution to the residual stream); `AblateLayer` zeroes the whole projection, which
  removes the sliding window (a sliding layer) or the compressed branch (a compressed layer
  with no local window); `ZeroPositionBias` sets a compressor's learned per-phase parameters
  to their uniform value (`softmax_pool`'s logits, `deepseek_v4`'s `ape`, `low_rank`'s
  corrections); `RollPositionBias` moves each phase's parameters to the next phase
  (`new[phi] = old[phi - 1]`), so a weak spot carried by the bias moves with it;
* switches of the attention layer (`changes_program = True`: each compiles on its own):
  `NoRopeCompressed` (compressed keys not rotated to their window start),
  `NoCompressedBranch` and `NoLocalWindow` (one branch of a compressed layer with both);
* edits with one value per evaluation row (`changes_program = True`; built inside the
  chunk that reads them): `HideEntries(layer, windows)` hides the marked compressed entries
  `(B, C)` from every query (and from the layer's indexer); `CutLocalEdges(layer,
  spans)` removes the local branch's edges from queries after each row's span `(B, 2)` to
  the tokens inside it (a sliding layer's whole window; a compressed layer's local window),
  so what the span holds reaches later tokens of that layer only through compressed entries;
* `V4PartOff(layer, part)`: a part of a DeepSeek-V4 layer switched off at inference (the
  indexer's top-k, also a compressed layer's; the sink; a csa/hca layer's local window);
* `PairIndexer(layer)`: each entry the indexer keeps read with the entry before it, at
  inference (`V4Switches.indexer_pairs`);
* `PatchEntries(layer, windows)`: the layer's compressor wrapped in `PatchedEntries`, which
  copies the compressed entries of the marked windows from a source world on the same batch
  axis (activation patching, `sims.decoder.interventions.patch_entries`).

Parameters may carry leading run axes (runs stacked on one state): every edit acts on every run.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar

import jax.numpy as jnp
from flax import nnx

from weakspots.idealized.decoder.attention import AbstractCompressor, Attention
from weakspots.idealized.decoder.config import DecoderConfig, LMConfig
from weakspots.idealized.decoder.layers.base import BOTH, AbstractLayerKind
from weakspots.idealized.decoder.layers.registry import lookup as layer_kind
from weakspots.idealized.decoder.model import Decoder
from weakspots.idealized.decoder.v4_attention import V4Attention
from weakspots.idealized.operators.base import DECODER
from weakspots.idealized.operators.registry import lookup


def position_parameters(operator: str) -> tuple[tuple[str, ...], int] | None:
    """The operator's learned position parameters: (names, the phase axis counted from the
    right), or None (the registry's `position_parameters`)."""
    return lookup(operator, DECODER).position_parameters


@dataclasses.dataclass(frozen=True)
class Edit(abc.ABC):
    """One intervention on layer `layer` of a decoder: `apply(model)` returns the edited copy."""

    layer: int
    kind: ClassVar[str]
    """The name reports use (`ablate_head`, `no_rope_compressed`, ...)."""
    label: ClassVar[str]
    """A reader's name, completed by `describe`."""
    changes_program: ClassVar[bool] = False
    """False: only parameter values change (edited states share one compiled program)."""

    def apply(self, model: Decoder) -> Decoder:
        """A copy of `model` with this edit made; `model` is left as it was."""
        edited = nnx.clone(model)
        self.edit(edited.blocks[self.layer].attention, edited.config)
        return edited

    @abc.abstractmethod
    def edit(self, attention: Attention, config: DecoderConfig) -> None:
        """Make the edit in place on the attention of `layer` (of a copy `apply` owns)."""

    def applies(self, config: LMConfig) -> bool:
        """Whether the edit means something for this design (e.g. a bias needs a learned one)."""
        kind = self.layer_kind(config)
        if kind is None:
            return False
        compressed = kind.pooled_by_operator and kind.reads_compressed(config)
        return self.applies_to(config, compressed)

    def applies_to(self, config: LMConfig, compressed: bool) -> bool:
        """`applies` for a layer in range; `compressed`: it has a compressed branch pooled by
        `--operator` (the compressor these edits change)."""
        return compressed

    def layer_kind(self, config: LMConfig) -> type[AbstractLayerKind] | None:
        """The kind of layer `layer` (`idealized.decoder.layers`), None when out of range."""
        if not 0 <= self.layer < len(config.layer_kinds):
            return None
        return layer_kind(config.layer_kinds[self.layer])

    @property
    def name(self) -> str:
        return f"{self.kind} layer {self.layer}"

    def describe(self, config: LMConfig) -> str:
        """A reader's name: `remove sliding window (layer 0)`, `zero position bias (layer 1)`, ..."""
        return f"{self.label} (layer {self.layer})"


@dataclasses.dataclass(frozen=True)
class AblateHead(Edit):
    """Head `head`'s rows of the output projection zeroed."""

    head: int
    kind = "ablate_head"
    label = "ablate head"

    def edit(self, attention, config):
        width = attention.head_dim
        _zero_rows(attention, slice(self.head * width, (self.head + 1) * width))

    def applies_to(self, config, compressed):
        return 0 <= self.head < config.heads

    @property
    def name(self) -> str:
        return f"{self.kind} layer {self.layer} head {self.head}"

    def describe(self, config):
        return f"ablate layer {self.layer} head {self.head}"


@dataclasses.dataclass(frozen=True)
class AblateLayer(Edit):
    """The whole output projection zeroed: the layer adds nothing to the residual stream."""

    kind = "ablate_layer"
    label = "remove layer"

    def edit(self, attention, config):
        _zero_rows(attention, slice(None))

    def applies_to(self, config, compressed):
        return True

    def describe(self, config):
        return f"remove {self.layer_kind(config).removed(config)} (layer {self.layer})"


@dataclasses.dataclass(frozen=True)
class _PositionBias(Edit):
    """A change to each of the compressor's learned per-phase parameters (`position_parameters`)."""

    @abc.abstractmethod
    def change(self, param: nnx.Variable, name: str, axis: int) -> None:
        """Change `param` (named `name`, its phase axis `axis` from the right) in place."""

    def edit(self, attention, config):
        names, axis = position_parameters(config.operator)
        for name in names:
            self.change(getattr(attention.compressor, name), name, axis)

    def applies_to(self, config, compressed):
        return compressed and position_parameters(config.operator) is not None


@dataclasses.dataclass(frozen=True)
class ZeroPositionBias(_PositionBias):
    """The compressor's learned per-phase parameters at their uniform value."""

    kind, label = "zero_position_bias", "zero position bias"

    def change(self, param, name, axis):
        if name != "right":  # low_rank: left = 0 leaves P_j = I / s (mean pooling)
            param[...] = jnp.zeros_like(param[...])


@dataclasses.dataclass(frozen=True)
class RollPositionBias(_PositionBias):
    """Each phase's learned parameters moved to the next phase: `new[phi] = old[phi - 1]`."""

    kind, label = "roll_position_bias", "roll position bias by one phase"

    def change(self, param, name, axis):
        param[...] = jnp.roll(param[...], 1, axis=axis)


@dataclasses.dataclass(frozen=True)
class _Switch(Edit):
    """One branch of a compressed layer switched off: `attention.<attribute> = off`, where the
    design has the `needs` field above 0 (`rope_dim`, `local_window`)."""

    changes_program = True
    attribute: ClassVar[str]
    off: ClassVar[object]
    needs: ClassVar[str]

    def edit(self, attention, config):
        setattr(attention, self.attribute, self.off)

    def applies_to(self, config, compressed):
        return compressed and getattr(config, self.needs) > 0


@dataclasses.dataclass(frozen=True)
class NoRopeCompressed(_Switch):
    """Compressed keys left unrotated (no RoPE at their window start)."""

    kind, label = "no_rope_compressed", "remove RoPE from compressed keys"
    attribute, off, needs = "rope_compressed", False, "rope_dim"


@dataclasses.dataclass(frozen=True)
class NoCompressedBranch(_Switch):
    """The compressed branch of a layer with a local window switched off."""

    kind, label = "no_compressed_branch", "remove compressed branch"
    attribute, off, needs = "use_compressed", False, "local_window"


@dataclasses.dataclass(frozen=True)
class NoLocalWindow(_Switch):
    """The local window of a compressed layer switched off."""

    kind, label = "no_local_window", "remove local window"
    attribute, off, needs = "local_window", 0, "local_window"


class PatchedEntries(AbstractCompressor):
    """A compressor over two worlds on one batch axis: rows `[0, B)` clean, `[B, 2B)` their sources.

    Entries of the clean rows at the windows marked in `windows` `(B, C)` are replaced by
    the source rows' entries of the same windows; the source rows pass unchanged.
    """

    def __init__(self, inner: AbstractCompressor, windows):
        self.inner, self.stride, self.windows = inner, inner.stride, windows

    def __call__(self, x, keys, values):
        entries = self.inner(x, keys, values)
        rows = self.windows.shape[0]
        mask = self.windows[:, :, None, None]

        def patch(e):
            clean, source = e[:rows], e[rows:]
            return jnp.concatenate([jnp.where(mask, source, clean), source], axis=0)

        return tuple(patch(e) for e in entries)

    def pooling_weights(self):
        return self.inner.pooling_weights()


@dataclasses.dataclass(frozen=True, eq=False)
class PatchEntries(Edit):
    """The layer's compressed entries at the marked `windows` `(B, C)` copied from the source
    world (`PatchedEntries`); the model then reads batches of `2B` rows, clean then source."""

    windows: object
    kind = "patch_entries"
    label = "patch compressed entries"
    changes_program = True

    def edit(self, attention, config):
        if isinstance(attention, V4Attention):
            attention.compressor = PatchedV4Entries(attention.compressor, self.windows)
        else:
            attention.compressor = PatchedEntries(attention.compressor, self.windows)
        if attention.indexer is not None:  # its entries and its indexer's keys alike
            indexer = attention.indexer
            indexer.compressor = PatchedV4Entries(indexer.compressor, self.windows)


class PatchedV4Entries(nnx.Module):
    """`PatchedEntries` for DeepSeek-V4's compressor (`x -> (2B, C, G, width)` entries)."""

    def __init__(self, inner, windows):
        self.inner, self.stride, self.windows = inner, inner.stride, windows

    def __call__(self, x):
        entries = self.inner(x)
        rows = self.windows.shape[0]
        clean, source = entries[:rows], entries[rows:]
        patched = jnp.where(self.windows[:, :, None, None], source, clean)
        return jnp.concatenate([patched, source], axis=0)

    def pooling_weights(self):
        return self.inner.pooling_weights()


@dataclasses.dataclass(frozen=True, eq=False)
class HideEntries(Edit):
    """The compressed entries marked in `windows` `(B, C)` hidden from every query of the layer
    (and from its indexer: the top-k picks among the others)."""

    windows: object
    kind = "hide_entries"
    label = "hide compressed entries"
    changes_program = True

    def edit(self, attention, config):
        attention.hidden_entries = nnx.data(jnp.asarray(self.windows, bool))

    def applies(self, config):
        kind = self.layer_kind(config)
        return kind is not None and kind.reads_compressed(config)


@dataclasses.dataclass(frozen=True, eq=False)
class CutLocalEdges(Edit):
    """The local branch's edges from a query after its row's span `[lo, hi]` (`spans` `(B, 2)`)
    to the tokens inside it removed: a sliding layer's, or a compressed layer's local window."""

    spans: object
    kind = "cut_local_edges"
    label = "cut local edges into the span"
    changes_program = True

    def edit(self, attention, config):
        attention.cut_spans = nnx.data(jnp.asarray(self.spans, jnp.int32))

    def applies(self, config):
        kind = self.layer_kind(config)
        return kind is not None and kind.has_local(config)


V4_PARTS = ("indexer", "sink", "local_window")
"""The parts of a DeepSeek-V4 layer `V4PartOff` switches off in a trained decoder."""


@dataclasses.dataclass(frozen=True)
class V4PartOff(Edit):
    """One part of a DeepSeek-V4 layer switched off at inference (`V4_PARTS`): the indexer's
    top-k (every visible entry read; a csa layer's or a compressed layer's), the attention
    sink, or a csa/hca layer's local window."""

    part: str
    kind = "v4_part_off"
    label = "switch off"
    changes_program = True

    def edit(self, attention, config):
        if self.part == "indexer":
            attention.index_topk, attention.indexer = 0, None
        elif self.part == "sink":
            attention.sinks = None
        else:
            attention.local_window = 0

    def applies(self, config):
        kind = self.layer_kind(config)
        if kind is None or self.part not in V4_PARTS:
            return False
        if self.part == "indexer":
            return kind.indexed(config)
        if self.part == "sink":
            return kind.v4 and config.sink
        return kind.v4 and kind.reads(config) == BOTH

    @property
    def name(self) -> str:
        return f"{self.kind} {self.part} layer {self.layer}"

    def describe(self, config):
        return f"switch off the {self.part.replace('_', ' ')} (layer {self.layer})"


@dataclasses.dataclass(frozen=True)
class PairIndexer(Edit):
    """The indexer's kept entries each read with the entry before it, at inference
    (`V4Switches.indexer_pairs`: with overlapping windows, both entries that pool a window
    read together), the trained weights kept; for a layer with an indexer not paired in
    training."""

    kind = "pair_indexer"
    label = "pair the indexer's entries"
    changes_program = True

    def edit(self, attention, config):
        attention.index_pairs = True

    def applies(self, config):  # a layer whose indexer could be switched off, not yet paired
        return V4PartOff(self.layer, "indexer").applies(config) and not config.indexer_pairs


EDITS: tuple[type[Edit], ...] = (
    AblateHead,
    AblateLayer,
    ZeroPositionBias,
    RollPositionBias,
    NoRopeCompressed,
    NoCompressedBranch,
    NoLocalWindow,
    HideEntries,
    CutLocalEdges,
    V4PartOff,
    PairIndexer,
    PatchEntries,
)
"""Every kind of edit."""


def apply_edits(model: Decoder, edits) -> Decoder:
    """`model` with each of `edits` applied in turn (a copy; `model` is left as it was)."""
    for edit in edits:
        model = edit.apply(model)
    return model


def _zero_rows(attention, rows: slice) -> None:
    kernel = attention.out.kernel
    kernel[...] = kernel[...].at[..., rows, :].set(0.0)


__all__ = [
    "EDITS",
    "AblateHead",
    "AblateLayer",
    "CutLocalEdges",
    "Edit",
    "HideEntries",
    "NoCompressedBranch",
    "NoLocalWindow",
    "NoRopeCompressed",
    "PatchEntries",
    "PatchedEntries",
    "PatchedV4Entries",
    "RollPositionBias",
    "V4PartOff",
    "ZeroPositionBias",
    "apply_edits",
]
