"""The records the step loop hands the StepLog, each passed whole: a general forward pass
(StepRecord) and a run of decode steps (SegmentRecord, a macro-step or one decode step)."""

from __future__ import annotations

import numpy as np


class StepRecord:
    """One general forward pass as the engine records it (a steps.csv row, plus `emitters`)."""

    # PERF: a plain class, not a dataclass: mypyc compiles this __init__ (one per general step).

    def __init__(self, end_s: float, duration_s: float, replica: int, num_seqs: int, slots: int, prefill_tokens: int,
                 decode_tokens: int, bound: int, flops: float, bytes_: float, kv_used_units: int, kv_held_tokens: int,
                 kv_stored_tokens: int, waiting: int, preempted: int, kv_shared_units: int, emitters: int = 0) -> None:
        self.end_s = end_s  # when the pass ended
        self.duration_s = duration_s  # how long it took
        self.replica = replica  # which replica ran it
        self.num_seqs = num_seqs  # sequences in the batch
        self.slots = slots  # slots the batch held (static batches keep finished members' slots)
        self.prefill_tokens = prefill_tokens  # prompt tokens computed
        self.decode_tokens = decode_tokens  # generated tokens computed (a speculative decoder counts each)
        self.bound = bound  # index into core.names.BOUNDS: the roofline term that took longest
        self.flops = flops  # floating-point operations of the pass
        self.bytes_ = bytes_  # bytes it moved to or from GPU memory
        self.kv_used_units = kv_used_units  # KV blocks in use after it (contiguous: token slots)
        self.kv_held_tokens = kv_held_tokens  # token slots those blocks hold
        self.kv_stored_tokens = kv_stored_tokens  # tokens stored in them (shared blocks counted once)
        self.waiting = waiting  # requests queued when it ended
        self.preempted = preempted  # requests it preempted
        self.kv_shared_units = kv_shared_units  # blocks shared by several sequences
        # decoders that emitted together at its start and again at its end: their shared gap is
        # its duration, so the GapLog leaves it to this record (see StepLog.decoder_gaps)
        self.emitters = emitters


class SegmentRecord:
    """k decode steps of the same sequences (k = len(ends)). Step j (1..k) attends ctx_full0 +
    num_seqs*o_j positions (ctx_sliding0 + below_window*o_j in sliding layers), holds used0 + the
    blocks `residues` add over its tokens, and stored0 + num_seqs*g_j tokens (o_j, g_j: j, or the
    speculative schedule's)."""

    # PERF: a plain class, not a dataclass: mypyc compiles this __init__ (one per decode run).
    def __init__(self, ends: list[float] | np.ndarray, start_s: float, replica: int, num_seqs: int, slots: int,
                 used0: int, residues: tuple[int, ...] | None, stored0: int, waiting: int | np.ndarray,
                 ctx_full0: int, ctx_sliding0: int, below_window: int, shared: int = 0, step0: int = 0,
                 state_units: int = 0, waiting_last: int | None = None, cut_last: int = 0) -> None:
        self.ends = ends  # each step's end time
        self.start_s = start_s  # when the first step started
        self.replica = replica  # which replica ran them
        self.num_seqs = num_seqs  # sequences decoding
        self.slots = slots  # slots the batch held
        self.used0 = used0  # KV units in use before the first step
        self.residues = residues  # decoders per block-boundary residue (paged; None: contiguous)
        self.stored0 = stored0  # tokens stored before the first step (shared blocks counted once)
        self.waiting = waiting  # queue length each step ends with (one number, or one per step)
        self.ctx_full0 = ctx_full0  # the decoders' context sum before the first step
        self.ctx_sliding0 = ctx_sliding0  # the same, capped at the sliding window
        self.below_window = below_window  # decoders still inside the sliding window
        self.shared = shared  # KV blocks shared by several sequences
        self.step0 = step0  # the running set's step count before the first step
        self.state_units = state_units  # units of `used` that are per-sequence state, not token slots
        self.waiting_last = waiting_last  # the last step's queue, when only it differs from `waiting`
        self.cut_last = cut_last  # tokens the last step gave finishing sequences beyond their want (not stored)
