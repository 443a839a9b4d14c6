"""The `llmdissect` command: one module per subcommand, registered in `main.py`."""
