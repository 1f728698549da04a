"""The names records store as small integer codes: a request's outcome, the term that bounds a
step, and why a request was rejected. Everything that writes or reads those codes indexes these
tuples, so a code means the same in the engine, the summary and the CSV files."""

from __future__ import annotations

OUTCOMES = ("completed", "rejected", "unfinished")  # every arrived request ends as one of these
BOUNDS = ("compute", "memory", "overhead")  # the roofline term that took the most time in a step
REJECT_REASONS = ("exceeds_max_model_len", "exceeds_kv_capacity")
