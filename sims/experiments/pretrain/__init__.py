"""Experiments on models pretrained as the paper does it (`sims.pretrain`): see DEVELOPERS.md."""

# The packages the pretraining study trains and scores with (the decoder's and the
# pretraining family's model and trainer): their digest joins its store key.
ENGINE = (
    "weakspots.idealized.decoder",
    "weakspots.idealized.pretrain",
    "weakspots.sims.decoder",
    "weakspots.sims.pretrain",
)
