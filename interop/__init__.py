"""Bridges to other implementations: load their weights into the project's layers (`interop.hf`)."""
