"""What a deployment costs (DESIGN §8): GPU-hour prices (from the hardware profile or the user) ->
$ per hour -> $ per 1M tokens at a stated load.

    $/hour     = price per GPU-hour x every GPU the deployment holds
                 (tensor-parallel x pipeline-parallel GPUs per replica x replicas)
    $/1M tokens = $/hour / (the deployment's tokens per second x 3,600) x 1e6

A per-token figure is only meaningful at the load it was taken at, so each carries that load.
Where neither the profile nor the user gives a price the answer is None (shown as "n/a"), never a
made-up number.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from capsim.errors import CapsimError, quote
from capsim.spec.catalog import load_hardware

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class DeploymentCost:
    """What a simulated deployment costs, and at which load its per-token figures hold."""

    gpus: int  # every GPU held: tp x pp per replica x replicas (a draft model shares its target's GPUs)
    price_per_gpu_hour_usd: float | None
    price_source: str | None  # 'user', 'profile', or None (no price known)
    usd_per_hour: float | None  # price per GPU-hour x gpus
    usd_per_m_output_tokens: float | None  # at `load`, from the run's output tokens/s
    usd_per_m_total_tokens: float | None  # ... prompt + output tokens/s
    load: str  # the offered load the per-token figures were taken at, in words

    def as_dict(self) -> dict:
        return asdict(self)


def deployment_gpus(tp: int = 1, pp: int = 1, replicas: int = 1) -> int:
    """Every GPU a deployment holds: tp x pp GPUs per replica, times the replicas."""
    return tp * pp * replicas


def deployment_cost(price_usd_per_gpu_hour: float | None, price_source: str | None, gpus: int,
                    output_tokens_per_s: float, total_tokens_per_s: float, load: str) -> DeploymentCost:
    """The deployment's $/hour and $/1M tokens at the run's throughput (see the module docstring)."""
    per_hour = None if price_usd_per_gpu_hour is None else price_usd_per_gpu_hour * gpus
    return DeploymentCost(gpus, price_usd_per_gpu_hour, price_source, per_hour,
                          usd_per_million_tokens(per_hour, output_tokens_per_s),
                          usd_per_million_tokens(per_hour, total_tokens_per_s), load)


def usd_per_million_tokens(usd_per_hour: float | None, tokens_per_s: float) -> float | None:
    """$ per 1M tokens for whatever costs `usd_per_hour` and produces `tokens_per_s` (the whole
    deployment for both); None without a price or without tokens."""
    if usd_per_hour is None or not tokens_per_s > 0:
        return None
    return usd_per_hour / (tokens_per_s * SECONDS_PER_HOUR) * 1e6


def parse_prices(texts: list[str] | None) -> float | dict[str, float] | None:
    """`--price-per-hour` values: one number for every GPU, or GPU=PRICE pairs (repeatable).

    Returns a float, a {canonical GPU name: price} dict, or None when nothing was given."""
    if not texts:
        return None

    plain = [t for t in texts if "=" not in t]
    if plain and len(texts) > 1:
        raise CapsimError(
            f"--price-per-hour: give either one price for every GPU (e.g. 0.74) or GPU=PRICE pairs "
            f"(e.g. rtx4090=0.74 --price-per-hour rtx5090=0.89), not both (got {', '.join(texts)})."
        )
    if plain:
        return _price(plain[0], plain[0])
    prices = {}
    for text in texts:
        gpu, _, value = text.partition("=")
        prices[load_hardware(gpu.strip()).name] = _price(value, text)
    return prices


def _price(value: str, text: str) -> float:
    try:
        price = float(value)
    except ValueError:
        price = float("nan")
    if not price > 0 or price == float("inf"):
        raise CapsimError(
            f"--price-per-hour {quote(text)}: the price must be a positive number of US dollars per GPU-hour "
            "(e.g. 0.74), or GPU=PRICE (e.g. rtx5090=0.89)."
        )
    return price


def price_for(gpu_name: str, profile_price: float | None,
              override: float | dict[str, float] | None) -> tuple[float | None, str | None]:
    """(price $/GPU-h, where it came from: 'user', 'profile' or None) for one GPU."""
    if isinstance(override, dict):
        if gpu_name in override:
            return override[gpu_name], "user"
    elif override is not None:
        return float(override), "user"
    if profile_price is not None:
        return profile_price, "profile"
    return None, None
