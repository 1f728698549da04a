"""What a token costs: GPU-hour prices (from the hardware profile or the user) -> $ per 1M tokens.

$ per 1M tokens = price per GPU-hour / (tokens per second x 3,600) x 1e6, per GPU: a fleet of n
replicas each serving 1/n of the traffic costs n x the price for n x the tokens, so the per-token
figure is the same formula at each replica's own load. Where neither the profile nor the user
gives a price the answer is None (shown as "n/a"), never a made-up number.
"""

from __future__ import annotations

from capsim.errors import CapsimError, quote

SECONDS_PER_HOUR = 3600.0


def usd_per_million_tokens(price_usd_per_hour: float | None, tokens_per_s: float) -> float | None:
    """$ per 1M tokens for one GPU producing `tokens_per_s`; None without a price or without tokens."""
    if price_usd_per_hour is None or not tokens_per_s > 0:
        return None
    return price_usd_per_hour / (tokens_per_s * SECONDS_PER_HOUR) * 1e6


def parse_prices(texts: list[str] | None) -> float | dict[str, float] | None:
    """`--price-per-hour` values: one number for every GPU, or GPU=PRICE pairs (repeatable).

    Returns a float, a {canonical GPU name: price} dict, or None when nothing was given."""
    if not texts:
        return None
    from capsim.catalog import load_hardware

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
