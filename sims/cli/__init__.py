"""The `weakspots` command line."""
