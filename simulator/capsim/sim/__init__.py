"""The simulation: KV-cache allocators, the running set, schedulers (they plan, never act),
replicas, the arrival processes, the clock (the only code that touches SimPy's internals) and the
step loop, plus the flat records it writes (step and request logs). Time passes only here.

May import: capsim.cost, capsim.workload, capsim.spec, capsim.core, capsim.errors, and SimPy (the
only package that does). Compiled with mypyc (setup.py), except clock.py, which extends SimPy's
Python classes."""
