"""How the induction model (idealized.induction) is run: SGD many at once (`train`), the
gradient flow (`flow`), and the end-state summaries both share (`summary`)."""

from weakspots.sims.induction.flow import FlowHistory as FlowHistory
from weakspots.sims.induction.flow import solve as solve
from weakspots.sims.induction.summary import end_state as end_state
from weakspots.sims.induction.train import TrainHistory as TrainHistory
from weakspots.sims.induction.train import train_runs as train_runs
