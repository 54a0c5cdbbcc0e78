"""The family study: the decoder family trained alike over operator x stride x context
(`study`), its experiment (`lm_family`) and its recorded reports (`runs/`); the store key of
its experiment digests this folder."""
