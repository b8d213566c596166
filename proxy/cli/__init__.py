"""The `recap-proxy` command: one module per command family (`main` parses and dispatches)."""
