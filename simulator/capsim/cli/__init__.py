"""The `capsim` command: a Typer app with one module per command group, each a thin wrapper that
parses, calls a public function and prints. Typer is imported nowhere else.

May import: anything in capsim."""
