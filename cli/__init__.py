"""The `testbed` command line: thin typer commands over orchestrator/ and analysis/."""
