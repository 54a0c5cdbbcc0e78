"""One module per figure: read results, overlay theory, draw.

Each `figures/<name>.py` exposes `make(results, predictions) -> matplotlib.figure.Figure`
for the results and predictions of the experiment named `<name>`
(`sims.experiments.<family>.<name>`), and its two-line `CAPTION`; `figures.style` holds the shared
look. `DRAWINGS` maps an experiment's name to the module that draws it: sims never
imports matplotlib, so a figure is found by its experiment's name here, in the layer
that sees both (the experiments with one say `drawn=True`).
"""

from weakspots.figures import (
    finite_d_accuracy,
    growth_rate,
    head_ablation,
    induction_collision,
    induction_concentration,
    induction_coverage,
    induction_phase_accuracy,
    learned_gain,
    lm_amplifier,
    lm_amplifier_profile,
    lm_family,
    lm_footprint,
    lm_mechanism,
    lm_mitigations,
    lm_position,
    lm_selection,
    lm_toy,
    mitigations,
    operators,
    paper_lookup,
    phase_diagram,
    pooling_dynamics,
    rope_anchoring,
    specialization_time,
    support_size,
    weak_spots,
)

# The figure module of each drawn experiment, by the experiment's name.
DRAWINGS = {
    module.__name__.rsplit(".", 1)[-1]: module
    for module in (
        weak_spots,
        pooling_dynamics,
        phase_diagram,
        growth_rate,
        specialization_time,
        support_size,
        head_ablation,
        operators,
        rope_anchoring,
        mitigations,
        finite_d_accuracy,
        learned_gain,
        lm_position,
        lm_family,
        lm_mechanism,
        lm_toy,
        lm_mitigations,
        lm_amplifier,
        lm_amplifier_profile,
        lm_footprint,
        lm_selection,
        paper_lookup,
        induction_concentration,
        induction_coverage,
        induction_phase_accuracy,
        induction_collision,
    )
}
