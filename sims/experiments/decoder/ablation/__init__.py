"""The ablation study: designs trained and taken apart by interventions (`study`, and
`causal_study`, which decides a design's mechanism from them), its experiments
(`lm_mechanism`, `lm_mitigations`, `lm_toy`) and its recorded reports (`runs/`); the store
key of its experiments digests this folder."""
