"""The amplifier study: DeepSeek-V4's attention with its switches taken away or added one at a
time (`study`), its experiments (`lm_amplifier`, `lm_amplifier_profile`) and its recorded
reports (`runs/`); the store key of its experiments digests this folder."""
