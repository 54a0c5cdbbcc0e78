"""One module per figure: read results, overlay theory, draw.

Each `figures/<name>.py` exposes `make(results, predictions) -> matplotlib.figure.Figure`
for the results and predictions of the experiment `sims.experiments.<name>`, and its
two-line `CAPTION`; `figures.style` holds the shared look. `EXPERIMENTS` is
`sims.experiments.EXPERIMENTS` with each figure attached to the experiment it draws
(`Experiment.figure`, `Experiment.caption`): sims never imports matplotlib, so the
figures are attached here, in the layer that sees both.
"""

from weakspots.figures import (
    finite_d_accuracy,
    growth_rate,
    head_ablation,
    learned_gain,
    lm_family,
    lm_mechanism,
    lm_mitigations,
    lm_position,
    lm_toy,
    mitigations,
    operators,
    phase_diagram,
    pooling_dynamics,
    rope_anchoring,
    specialization_time,
    support_size,
    weak_spots,
)
from weakspots.sims import experiments as _experiments

# The experiment each figure module draws.
DRAWINGS = {
    _experiments.weak_spots.EXPERIMENT: weak_spots,
    _experiments.pooling_dynamics.EXPERIMENT: pooling_dynamics,
    _experiments.phase_diagram.EXPERIMENT: phase_diagram,
    _experiments.growth_rate.EXPERIMENT: growth_rate,
    _experiments.specialization_time.EXPERIMENT: specialization_time,
    _experiments.support_size.EXPERIMENT: support_size,
    _experiments.head_ablation.EXPERIMENT: head_ablation,
    _experiments.operators.EXPERIMENT: operators,
    _experiments.rope_anchoring.EXPERIMENT: rope_anchoring,
    _experiments.mitigations.EXPERIMENT: mitigations,
    _experiments.finite_d_accuracy.EXPERIMENT: finite_d_accuracy,
    _experiments.learned_gain.EXPERIMENT: learned_gain,
    _experiments.lm_position.EXPERIMENT: lm_position,
    _experiments.lm_family.EXPERIMENT: lm_family,
    _experiments.lm_mechanism.EXPERIMENT: lm_mechanism,
    _experiments.lm_toy.EXPERIMENT: lm_toy,
    _experiments.lm_mitigations.EXPERIMENT: lm_mitigations,
}

EXPERIMENTS = tuple(
    experiment.replace(figure=DRAWINGS[experiment].make, caption=DRAWINGS[experiment].CAPTION)
    if experiment in DRAWINGS
    else experiment
    for experiment in _experiments.EXPERIMENTS
)
