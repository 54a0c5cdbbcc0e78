"""Decoder layer kinds (the values of `--layout`): one abstraction (`base`), one final class
per file, one registry (`registry`) that every consumer asks."""

from weakspots.idealized.decoder.layers.base import AbstractLayerKind as AbstractLayerKind
from weakspots.idealized.decoder.layers.compressed import Compressed as Compressed
from weakspots.idealized.decoder.layers.csa import CSA as CSA
from weakspots.idealized.decoder.layers.dense import Dense as Dense
from weakspots.idealized.decoder.layers.hca import HCA as HCA
from weakspots.idealized.decoder.layers.registry import layer_kind_names as layer_kind_names
from weakspots.idealized.decoder.layers.registry import lookup as lookup
from weakspots.idealized.decoder.layers.registry import register as register
from weakspots.idealized.decoder.layers.registry import unregister as unregister
from weakspots.idealized.decoder.layers.sliding import Sliding as Sliding
from weakspots.idealized.decoder.layers.swa import SWA as SWA
