"""The handoff of disaggregated serving: a prompt prefilled in a prefill instance has its KV moved
over the link to a decode instance. No clock here: the engine (capsim.sim.intake) asks when a
transfer lands and makes the event.

Each prefill instance sends over its own link (one per GPU, the TP shards moving in parallel), one
transfer after another: a transfer starts when the request's prefill ends or when the previous
transfer from that instance has left the link, whichever is later, holds the link for
per_transfer_s + bytes / bandwidth, and lands latency_s after that. The prefill instance keeps the
request's KV blocks until it lands (the decode side pulls from them).
"""

from __future__ import annotations

from capsim.core.request import Request
from capsim.sim.buffers import Records


class Handoff:
    """The link between the pools, the transfers under way and a record of every transfer."""

    def __init__(self, bytes_per_s: float, latency_s: float, per_transfer_s: float,
                 shard_bytes_per_token: float) -> None:
        self.bytes_per_s = bytes_per_s  # achieved bandwidth of one GPU's link, one direction
        self.latency_s = latency_s  # one way, after the bytes have left
        self.per_transfer_s = per_transfer_s  # fixed link time per transfer
        self.shard_bytes_per_token = shard_bytes_per_token  # KV bytes of one token that one link carries
        self.free_at_s: dict[int, float] = {}  # prefill replica index -> when its link is next free
        self.landing_s: dict[int, float] = {}  # request id -> when its KV lands (transfers under way)
        self.moving: dict[int, Request] = {}  # request id -> the request whose KV is under way
        # One row per transfer: when it was sent and landed, its bytes, the wait for the link, the
        # sending replica and the request.
        self.records = Records(("sent_s", "land_s", "bytes", "queue_s", "sender", "id"),
                               ("sent_s", "land_s", "bytes", "queue_s"))

    def link_s(self, tokens: int) -> float:
        """Seconds a link is busy moving the KV of `tokens` tokens (without latency)."""
        return self.per_transfer_s + tokens * self.shard_bytes_per_token / self.bytes_per_s

    def send(self, sender: int, req: Request, now_s: float) -> float:
        """Queue the KV of the request's computed tokens on the sender's link; returns when it lands."""
        start = max(now_s, self.free_at_s.get(sender, 0.0))
        free = start + self.link_s(req.computed_tokens)
        self.free_at_s[sender] = free
        land = free + self.latency_s
        self.landing_s[req.id] = land
        self.moving[req.id] = req
        self.records.add((now_s, land, req.computed_tokens * self.shard_bytes_per_token, start - now_s), (sender, req.id))
        return land

    def landed(self, req: Request) -> None:
        del self.landing_s[req.id]
        del self.moving[req.id]

    def next_landing_s(self) -> float | None:
        return min(self.landing_s.values()) if self.landing_s else None
