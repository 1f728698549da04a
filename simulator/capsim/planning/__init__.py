"""Questions over many simulations: tasks and their flat records, parallel runs (process pool or
Dask), sweeps, compares, capacity searches, multi-seed confidence, prices. Never draws.

May import: capsim.api and everything below it."""
