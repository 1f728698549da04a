"""Workloads: the workload file's schema and the request streams it describes (arrival times,
length distributions, traces, closed-loop users' lengths and think times), all seeded.

May import: capsim.spec, capsim.core, capsim.errors."""
