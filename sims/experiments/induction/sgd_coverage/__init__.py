"""Coverage under SGD's shared minibatch noise (`induction_sgd_coverage`): the derived law
(theory.induction_sgd) against SGD on settings the derivation never saw, and the remedies it
implies; `runs/sgd.json` holds the recorded 256-seed runs the quick report reads."""
