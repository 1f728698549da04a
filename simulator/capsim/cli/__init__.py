"""The `capsim` command: a Typer app with one module per command group, each a thin wrapper that
parses, calls a public function and prints. app.py holds the app, the order of the commands and the
entry point; common.py the consoles, shared options and helpers; run, planning (compare, sweep,
capacity), plot, reference (tables, validate), catalog (gpus, models, engines, schema) and
calibrate the commands. Typer is imported nowhere else.

May import: anything in capsim."""
