"""Phase scans of real models: needles and prompt ends at exact token offsets, per phase.

`weakspots.probe(...)` (this package is callable: it runs `probe.run.probe`) and the
verb `weakspots probe`. The design (`probe.design`), the backends (`probe.backends`:
`openai`, `hf`, `decoder`), the tokenizers (`probe.tokenizers`), the run with its
store, retries and resume (`probe.run`) and the statistics (`probe.report`);
`docs/probe.md` explains them.
"""

from __future__ import annotations

import sys
import types

from .design import ProbeConfig as ProbeConfig
from .run import probe as probe

__all__ = ["ProbeConfig", "probe"]


class _CallableModule(types.ModuleType):
    """`weakspots.probe` is both this package and the function that runs a probe."""

    def __call__(self, *args, **kwargs):
        return probe(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
