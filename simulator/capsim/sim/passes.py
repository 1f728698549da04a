"""Pass: one forward pass (or a macro-step of decode steps) as the step loop prices it, waits for
it and applies it (capsim.sim.engine)."""

from __future__ import annotations

import numpy as np

from capsim.cost.roofline import StepCost


class Pass:
    """One priced pass: a general step, or k decode steps run as one wait (a macro-step). What
    the wait and the apply need from the pricing, passed whole."""

    ends: list[float] | np.ndarray  # decode steps: each step's end time (set by run_until)

    def __init__(self, start_s: float, end_s: float, k: int, num_decoders: int, cost: StepCost | None) -> None:
        self.start_s = start_s  # the clock when the pass was planned
        self.end_s = end_s  # when it ends (its last step's end)
        self.k = k  # steps it runs (0: the horizon falls inside the first, which never ends)
        self.num_decoders = num_decoders  # running requests that decode one token per step
        self.cost = cost  # a general step's price (decode steps are priced into `ends`)
        # Decode steps: the state their records are computed from, taken before the wait.
        self.used0 = 0  # KV units in use
        self.stored0 = 0  # tokens stored
        self.residues: tuple[int, ...] | None = None  # decoders per block-boundary residue (paged)
        self.waiting: int | np.ndarray = 0  # queue length each step ends with (one number, or per step)
        self.ctx_full0 = 0  # decoders' context sums now: all layers, sliding-window layers
        self.ctx_sliding0 = 0
        self.below = 0  # decoders still inside the sliding window
        self.step0 = 0  # the running set's step count
        self.prefill_tokens = 0  # a general step: prompt tokens it computed (set when applied)

    def run_until(self, ends: list[float] | np.ndarray) -> None:
        """Decode steps: the end times of the steps it runs."""
        self.ends, self.end_s = ends, float(ends[-1])
