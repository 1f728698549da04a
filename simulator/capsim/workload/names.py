"""Every catalogue name a workload gives (model, GPU, formats, engine, draft model), checked
together: a file with a misspelled model and a misspelled GPU hears about both at once, each on
its own line with the closest names, in the words the run's own look-ups use."""

from __future__ import annotations

from capsim.errors import CapsimError
from capsim.spec.catalog import load_hardware, load_model
from capsim.spec.formats import get_format
from capsim.spec.serving import load_engine
from capsim.workload.schema import WorkloadConfig


def check_names(w: WorkloadConfig, source: str, skip: tuple[str, ...] = ()) -> None:
    """Raises one CapsimError listing each name that names nothing (one line each), or returns.
    `skip`: fields a planning command replaces with values of its own (checked there)."""
    lookups = [("weights", lambda: get_format(w.weights, where=f"{source}: field 'weights'")),
               ("kv_cache", lambda: get_format(w.kv_cache, for_kv=True, where=f"{source}: field 'kv_cache'"))]
    if isinstance(w.model, str):
        lookups.insert(0, ("model", lambda: load_model(w.model)))
    if w.gpu is not None:
        lookups.insert(1, ("gpu", lambda: load_hardware(w.gpu)))
    if w.engine is not None:
        lookups.append(("engine", lambda: load_engine(w.engine)))
    if w.speculative is not None and w.speculative.draft_model:
        lookups.append(("speculative.draft_model", lambda: load_model(w.speculative.draft_model)))
    problems = []
    for field, look_up in [(f, look) for f, look in lookups if f not in skip]:
        try:
            look_up()
        except CapsimError as exc:
            text = str(exc)
            problems.append(text if field in ("weights", "kv_cache") else f"{source}: field '{field}': {text}")
    if problems:
        raise CapsimError("\n".join(problems))
