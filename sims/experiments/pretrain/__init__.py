"""Experiments on models pretrained as the paper does it (`sims.pretrain`): see DEVELOPERS.md."""

from weakspots.sims.experiments import decoder

# The packages the pretraining study trains and scores with (the decoder's engine, and the
# pretraining family's model and trainer): their digest joins its store key.
ENGINE = (*decoder.ENGINE, "weakspots.idealized.pretrain", "weakspots.sims.pretrain")
