"""Experiments on models pretrained as the paper does it (`sims.pretrain`): see DEVELOPERS.md."""
