"""Plain data shared by every layer: a request's counts and times, a step's plan, and the names of
outcomes, step bounds and reject reasons. No logic beyond properties, no clock, no I/O.

May import: nothing in capsim but capsim.errors. Compiled with mypyc (setup.py)."""
