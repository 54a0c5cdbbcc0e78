"""How things are run. Below every family: `store` (results keyed by config), `progress`,
`schedule`. The families' engines: `toy`, `decoder`, `induction`, `pretrain`. Above them:
`sweep` (TOML sweeps over any family, one host or many) and `experiments` (simulation against
theory, one study per package). The command line above all of them is `weakspots.cli`."""
