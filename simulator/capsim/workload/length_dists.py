"""Length distributions of the workload file (DESIGN §5): how many prompt or output tokens each
request gets. Validated, frozen data; capsim.workload.streams draws from them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from capsim.spec import limits as L
from capsim.spec.config import Frozen

# A token count as a length distribution gives it.
Tokens = Annotated[int, Field(gt=0, le=L.MAX_TOKENS)]


class Fixed(Frozen):
    dist: Literal["fixed"]
    value: Tokens


class Uniform(Frozen):
    """Integers uniform on [min, max], both included."""

    dist: Literal["uniform"]
    min: Tokens
    max: Tokens

    @model_validator(mode="after")
    def _order(self) -> Uniform:
        if self.max < self.min:
            raise ValueError("max must be >= min")
        return self


class _Clipped(Frozen):
    """A continuous distribution rounded to integers and clipped to [min, max] (no max: clipped
    to limits.MAX_TOKENS, a billion)."""

    min: Tokens = 1
    max: Tokens | None = None

    @model_validator(mode="after")
    def _order(self) -> _Clipped:
        if self.max is not None and self.max < self.min:
            raise ValueError("max must be >= min")
        return self


class Normal(_Clipped):
    dist: Literal["normal"]
    mean: float = Field(gt=0, le=L.MAX_TOKENS)
    std: float = Field(ge=0, le=L.MAX_TOKENS)


class LogNormal(_Clipped):
    """Long-tailed lengths (ShareGPT-like): `mean` of the distribution and log-space `sigma`."""

    dist: Literal["lognormal"]
    mean: float = Field(gt=0, le=L.MAX_TOKENS)
    sigma: float = Field(gt=0, le=10, description="log-space spread (ShareGPT-like traffic: about 0.5-1.5)")


class Empirical(Frozen):
    """A histogram: `values[i]` drawn with weight `weights[i]` (uniform when weights are omitted)."""

    dist: Literal["empirical"]
    values: list[Tokens] = Field(min_length=1)
    weights: list[Annotated[float, Field(ge=0, le=L.MAX_WEIGHT)]] | None = None

    @model_validator(mode="after")
    def _shape(self) -> Empirical:
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError("weights must have one entry per value")
            if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
                raise ValueError("weights must be >= 0 with a positive sum")
        return self


class InOrder(Frozen):
    """These exact values, in order, repeating if more requests arrive than values given."""

    dist: Literal["sequence"]
    values: list[Tokens] = Field(min_length=1)


class FromTrace(Frozen):
    """Lengths come from the arrivals trace (arrivals.kind: trace)."""

    dist: Literal["trace"]


Lengths = Annotated[Fixed | Uniform | Normal | LogNormal | Empirical | InOrder | FromTrace, Field(discriminator="dist")]
