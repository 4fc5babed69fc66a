"""Paired runs in shuffled rounds under a time budget, and distribution-free confidence
intervals: how the overhead benchmarks decide a target in one run on a noisy machine.

A virtual machine's plain loop can drift by 10-20% between runs a few seconds apart (CPU
and GPU clocks, neighbours). Comparing medians of separate runs then decides nothing at a
margin of 0.03x. Here every timed run of a variant is *paired* with a run of its baseline
right before or after it (the order drawn at random for each pair, so that neither always
runs first), the variants' order is shuffled in every round, and rounds go on until a time
budget is spent. What the pair shares (the machine's state of those few hundred
milliseconds) cancels in its ratio and difference; what is left varies from pair to pair,
and the median over the pairs comes with a confidence interval from order statistics (the
sign-test interval: no assumption on the noise's distribution, robust to the odd pair hit
by a pause). Two variants measured in the same round are compared by the median of their
per-round differences, with the same interval.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

CONFIDENCE = 0.95


@dataclass
class Estimate:
    """A median and its confidence interval (``low``, ``high``)."""

    median: float
    low: float
    high: float
    n: int

    def verdict(self, target: float) -> str:
        """``met`` when the whole interval is at or below ``target``, ``MISSED`` when it is
        above, else ``undecided`` (the run could not tell: more rounds would)."""
        if self.high <= target:
            return "met"
        if self.low > target:
            return "MISSED"
        return "undecided"


def median_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    """The median of ``values`` with the distribution-free interval between two of its
    order statistics: [x(k), x(n+1-k)] with k the largest rank such that a Binomial(n, 1/2)
    falls below k with probability at most (1 - confidence) / 2. With fewer than 6 values
    no 95% interval exists: it is then the whole range."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    tail = (1.0 - confidence) / 2.0
    k, cumulative = 0, 0.0
    while k < n // 2:
        cumulative += math.comb(n, k) / 2.0 ** n  # P(Binomial(n, 1/2) == k)
        if cumulative > tail:
            break
        k += 1
    # P(B <= k - 1) <= tail: the interval between ranks k and n + 1 - k (1-based).
    low, high = (xs[k - 1], xs[n - k]) if k >= 1 else (xs[0], xs[-1])
    return Estimate(statistics.median(xs), low, high, n)


@dataclass
class Pairs:
    """One variant's timed runs and those of the baseline run beside each of them."""

    variant: list[float] = field(default_factory=list)
    base: list[float] = field(default_factory=list)

    def ratios(self) -> list[float]:
        return [v / b for v, b in zip(self.variant, self.base)]

    def ratio(self) -> Estimate:
        return median_ci(self.ratios())

    def added(self, per: int) -> Estimate:
        """Seconds added per unit of work (a sync, a step), pair by pair."""
        return median_ci([(v - b) / per for v, b in zip(self.variant, self.base)])


def ratio_difference(a: Pairs, b: Pairs) -> Estimate:
    """Round by round, ``a``'s ratio to its baseline less ``b``'s: how much more ``a``
    costs than ``b`` (a recorder against the debug-mode floor)."""
    return median_ci([x - y for x, y in zip(a.ratios(), b.ratios())])


def added_difference(a: Pairs, b: Pairs, per: int) -> Estimate:
    """Round by round, the time ``a`` adds per unit of work less the time ``b`` adds."""
    return median_ci([((av - ab) - (bv - bb)) / per
                      for av, ab, bv, bb in zip(a.variant, a.base, b.variant, b.base)])


def shown(estimate: Estimate, unit: str, *, scale: float = 1.0, signed: bool = False) -> str:
    """``1.12x [1.10-1.14]``, ``+6.50 us/sync [+5.40 to +7.60]``."""
    form = "+.2f" if signed else ".2f"
    mid, low, high = (format(v * scale, form) for v in (estimate.median, estimate.low, estimate.high))
    return f"{mid}{unit} [{low}{' to ' if signed else '-'}{high}]"


def spread(times: Sequence[float]) -> float:
    """Half the interquartile range over the median, in percent: how much runs of one
    variant differ from one another."""
    if len(times) < 4:
        return 0.0
    q1, q2, q3 = statistics.quantiles(times, n=4)
    return (q3 - q1) / q2 / 2 * 100


def measure(variants: Mapping[str, tuple[Callable[[], None], str]],
            bases: Mapping[str, Callable[[], None]], timer: Callable[[Callable[[], None]], float], *,
            seconds: float, rng: random.Random, min_rounds: int = 6,
            max_rounds: int = 10_000) -> tuple[dict[str, Pairs], int]:
    """Run every variant paired with its baseline (``variants``: name -> (run, base name)),
    in rounds of every variant once in a shuffled order, until ``seconds`` are spent (at
    least ``min_rounds``). Each run is timed by ``timer(run)``. Returns each variant's pairs
    and the number of rounds."""
    for run in bases.values():
        timer(run)  # warm-up: cuBLAS handles, code caches, the first syncs of each site
    for run, _ in variants.values():
        timer(run)
    pairs = {name: Pairs() for name in variants}
    names = list(variants)
    started = time.monotonic()
    rounds = 0
    while rounds < max_rounds and (rounds < min_rounds or time.monotonic() - started < seconds):
        rng.shuffle(names)
        for name in names:
            run, base = variants[name]
            if rng.random() < 0.5:
                b = timer(bases[base])
                v = timer(run)
            else:
                v = timer(run)
                b = timer(bases[base])
            pairs[name].variant.append(v)
            pairs[name].base.append(b)
        rounds += 1
    return pairs, rounds


__all__ = ["CONFIDENCE", "Estimate", "Pairs", "added_difference", "measure", "median_ci", "ratio_difference",
           "shown", "spread"]
