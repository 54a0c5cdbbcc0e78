"""The footprint and selection study: the compressed layer's window and top-k swept (`study`),
its experiments (`lm_footprint`, `lm_selection`) and its recorded reports (`runs/`); the store
key of its experiments digests this folder."""
