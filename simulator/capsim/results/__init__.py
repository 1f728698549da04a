"""From a finished simulation's records to answers: the summary (vLLM's metric names), exactly
rounded sums, the steady-state window and the saturation test, SLO objectives and verdicts, the
deployment's cost, provenance, the step and request tables and their CSV text, and the run result.

May import: capsim.sim, capsim.cost, capsim.workload, capsim.spec, capsim.core, capsim.errors."""
