"""Experiments: each a value bundling its simulations, theory's predictions and their comparison.

`EXPERIMENTS` is the one registry: `paper_repro.py` makes a figure and report rows from
each, `weakspots check` prints their rows. An experiment lives in its own module, in its
family's folder (`sims.experiments.toy.<name>`: the toy and the idealised §9 models;
`sims.experiments.decoder.<name>`: the decoders), as `EXPERIMENT = Experiment(name, run,
predict, rows, sizes=SIZES, ...)`, with its own settings at each size in `SIZES`; adding one
is writing that module and adding it to `EXPERIMENTS`:

    size = experiment.size_of("quick")                # the experiment's own settings record
    results = experiment.run(size)                    # SGD, flows, Monte Carlo
    predictions = experiment.predict(size, results)   # theory/ about the same quantities
    rows = experiment.rows(results, predictions)      # list[Row]

or all three at once, memoised in a result store: `evaluate(experiment, "quick", store_dir)`.

Conventions shared by every experiment: canonical physics (`canonical`: `TrainConfig()`'s
defaults, stride 8, 64 chunks, d = 64, gain 16, SGD lr 2, batch 256, 600 steps, so
gradient-flow time t = lr x steps = 1200); the order parameter delta = |log alpha - mean
log alpha| (`measure.order_parameter`); a phase is covered when its pooling weight exceeds
1/(2s) (idealized.metrics.support_size). Every prediction comes from `theory/`.
"""

from __future__ import annotations

from weakspots.sims.experiments.decoder.ablation import lm_mechanism, lm_mitigations, lm_toy
from weakspots.sims.experiments.decoder.amplifier import lm_amplifier, lm_amplifier_profile
from weakspots.sims.experiments.decoder.family import lm_family
from weakspots.sims.experiments.decoder.footprint import lm_footprint, lm_selection
from weakspots.sims.experiments.decoder.position import lm_position
from weakspots.sims.experiments.experiment import (
    KINDS,
    SIZE_NAMES,
    Evaluation,
    Experiment,
    Row,
    Table,
    evaluate,
    failing,
    jsonable,
    kind_counts,
)
from weakspots.sims.experiments.induction import (
    induction_collision,
    induction_concentration,
    induction_content,
    induction_coverage,
    induction_eps,
    induction_phase_accuracy,
    induction_time,
)
from weakspots.sims.experiments.induction.sgd_coverage import induction_sgd_coverage
from weakspots.sims.experiments.pretrain import emergence as pretrain_emergence
from weakspots.sims.experiments.pretrain import mechanism as pretrain_mechanism
from weakspots.sims.experiments.pretrain import paper_lookup
from weakspots.sims.experiments.scheduler import job_groups, train_planned, training_cost
from weakspots.sims.experiments.toy import (
    accuracy_formula,
    escape_onset,
    finite_d_accuracy,
    finite_d_limit,
    footprint_selection,
    growth_rate,
    head_ablation,
    head_coverage,
    learned_gain,
    learned_gain_end_state,
    learned_gain_law,
    linear_growth,
    mitigations,
    operators,
    phase_diagram,
    pooling_dynamics,
    readout_exact,
    reentry,
    rope_anchoring,
    selection_law,
    sgd_follows_flow,
    sgd_onset,
    solver,
    specialization_time,
    support_from_starts,
    support_size,
    threshold,
    time_to_specialise,
    weak_spots,
)

__all__ = [
    "EXPERIMENTS",
    "KINDS",
    "SIZE_NAMES",
    "Evaluation",
    "Experiment",
    "Row",
    "Table",
    "evaluate",
    "failing",
    "job_groups",
    "jsonable",
    "kind_counts",
    "train_planned",
    "training_cost",
]

EXPERIMENTS: tuple[Experiment, ...] = (
    # drawn by figures/ (figures.DRAWINGS, by name)
    weak_spots.EXPERIMENT,
    pooling_dynamics.EXPERIMENT,
    phase_diagram.EXPERIMENT,
    growth_rate.EXPERIMENT,
    specialization_time.EXPERIMENT,
    support_size.EXPERIMENT,
    head_ablation.EXPERIMENT,
    operators.EXPERIMENT,
    rope_anchoring.EXPERIMENT,
    mitigations.EXPERIMENT,
    finite_d_accuracy.EXPERIMENT,
    learned_gain.EXPERIMENT,
    lm_position.EXPERIMENT,
    lm_family.EXPERIMENT,
    lm_mechanism.EXPERIMENT,
    lm_toy.EXPERIMENT,
    lm_mitigations.EXPERIMENT,
    lm_amplifier.EXPERIMENT,
    lm_amplifier_profile.EXPERIMENT,
    lm_footprint.EXPERIMENT,
    lm_selection.EXPERIMENT,
    paper_lookup.EXPERIMENT,
    pretrain_mechanism.EXPERIMENT,
    pretrain_emergence.EXPERIMENT,
    induction_concentration.EXPERIMENT,
    induction_coverage.EXPERIMENT,
    induction_phase_accuracy.EXPERIMENT,
    induction_collision.EXPERIMENT,
    induction_content.EXPERIMENT,
    induction_eps.EXPERIMENT,
    induction_sgd_coverage.EXPERIMENT,
    # tables only
    linear_growth.EXPERIMENT,
    threshold.EXPERIMENT,
    support_from_starts.EXPERIMENT,
    time_to_specialise.EXPERIMENT,
    solver.EXPERIMENT,
    accuracy_formula.EXPERIMENT,
    head_coverage.EXPERIMENT,
    learned_gain_end_state.EXPERIMENT,
    reentry.EXPERIMENT,
    sgd_follows_flow.EXPERIMENT,
    finite_d_limit.EXPERIMENT,
    selection_law.EXPERIMENT,
    escape_onset.EXPERIMENT,
    sgd_onset.EXPERIMENT,
    readout_exact.EXPERIMENT,
    learned_gain_law.EXPERIMENT,
    footprint_selection.EXPERIMENT,
    induction_time.EXPERIMENT,
)
