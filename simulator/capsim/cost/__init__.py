"""What a forward pass costs: the realistic-mode rates of a GPU and engine, the memory budget (KV
capacity the way the serving engine sizes it) and the roofline cost model (one step, and a run of
identical decode steps). Pure functions of a plan's token counts: no clock, no running set.

May import: capsim.spec, capsim.core, capsim.errors. Compiled with mypyc (setup.py)."""
