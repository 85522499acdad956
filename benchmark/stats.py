"""Aggregate statistics over runs, after Agarwal et al. 2021 ("Deep RL at the edge of the
statistical precipice"): the interquartile mean (IQM) as the point estimate, stratified-bootstrap
confidence intervals, the probability of improvement between two curricula, and the diversity
of the data a collect run practised.

Samples are given per stratum (a task or env): `[[runs of task 1], [runs of task 2], ...]`. The
bootstrap resamples runs with replacement independently within each stratum and recomputes the
statistic on the resampled strata, so every resample keeps each task's number of runs.

Degenerate inputs have a documented result rather than a warning: a stratum with a single run
cannot vary under resampling and enters every resample as that run; when no stratum can vary
(one run each, or every value equal) the interval collapses to the point estimate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
N_RESAMPLES = 2000
SEED = 0
"""Bootstrap defaults: 95% percentile intervals from 2000 resamples of a seeded generator."""
TRIM = 0.25
"""trim_mean cuts this fraction of the values, rounded down, from each end: the mean of the
middle 50% when 4 divides their number; of 1 to 3 values none is cut, of 5 one from each end."""
MIN_RUNS_FOR_INTERVAL = 3
"""Reports show an interval only from this many runs (seeds) on: a bootstrap over one or two runs
only repeats them, so its interval says nothing about the next seed."""

Strata = Sequence[Sequence[float]]
EPISODES_ALPHA = 0.05
"""The level at which pooled episodes must back a difference the intervals call (`episodes_p`)."""


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its confidence interval [low, high]."""

    value: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float]:
        return {"value": self.value, "low": self.low, "high": self.high}


def iqm(values: Sequence[float] | np.ndarray) -> float:
    """Interquartile mean: the mean of the middle 50% of the values (scipy's trim_mean, 0.25,
    which cuts int(0.25 n) values from each end: the plain mean of 1 to 3 values)."""
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"iqm needs a non-empty 1-D sequence of numbers, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"iqm needs finite numbers, got {array.tolist()}")
    return float(stats.trim_mean(array, TRIM))


def iqm_ci(
    strata: Strata,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> Estimate:
    """IQM of all runs pooled over strata, with its stratified-bootstrap percentile interval."""
    samples = _as_strata(strata, "iqm_ci")
    pooled = np.concatenate(samples)

    def statistic(*resampled: np.ndarray, axis: int = -1) -> np.ndarray:
        return stats.trim_mean(np.concatenate(resampled, axis=-1), TRIM, axis=-1)

    return _stratified_bootstrap(samples, statistic, iqm(pooled), confidence, n_resamples, seed)


def episodes_p(successes: int, episodes: int, other_successes: int, other_episodes: int) -> float:
    """One-sided p that the first pooled episodes succeed more often than the others only by
    chance (Fisher's exact test on the 2x2 table): a check beside the intervals, which a bootstrap
    over seeds that all scored alike collapses to width 0 however few episodes stand behind them.
    Episodes of one seed share a policy, so this overstates the evidence: it only vetoes."""
    if min(episodes, other_episodes) < 1:
        return 1.0
    table = [
        [successes, episodes - successes],
        [other_successes, other_episodes - other_successes],
    ]
    return float(stats.fisher_exact(table, alternative="greater").pvalue)


def probability_of_improvement(
    x: Strata,
    y: Strata,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> Estimate:
    """P(X > Y): the chance a run of X beats a run of Y on the same task, ties counting one
    half (the Mann-Whitney U statistic over n*m), averaged over tasks; x[i] and y[i] hold the
    runs of X and Y on task i. The interval resamples runs of X and Y within each task."""
    xs, ys = (
        _as_strata(x, "probability_of_improvement x"),
        _as_strata(y, "probability_of_improvement y"),
    )
    if len(xs) != len(ys):
        raise ValueError(f"x has {len(xs)} tasks and y has {len(ys)}; give both the same tasks")
    tasks = len(xs)

    def statistic(*resampled: np.ndarray, axis: int = -1) -> np.ndarray:
        scores = [_beats(resampled[i], resampled[tasks + i]) for i in range(tasks)]
        return np.mean(scores, axis=0)

    value = float(np.mean([_beats(a, b) for a, b in zip(xs, ys, strict=True)]))
    return _stratified_bootstrap(xs + ys, statistic, value, confidence, n_resamples, seed)


def _beats(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mann-Whitney's U / (n m) along the last axis: P(x > y) + P(x = y) / 2."""
    greater = (x[..., :, None] > y[..., None, :]).mean(axis=(-2, -1))
    equal = (x[..., :, None] == y[..., None, :]).mean(axis=(-2, -1))
    return greater + 0.5 * equal


def _as_strata(strata: Strata, name: str) -> list[np.ndarray]:
    if isinstance(strata, np.ndarray) and strata.ndim == 1 or not len(strata):
        raise ValueError(f"{name} takes a list of strata (one list of run values per task)")
    samples = []
    for index, stratum in enumerate(strata):
        array = np.asarray(stratum, dtype=float)
        if array.ndim != 1 or array.size == 0:
            raise ValueError(
                f"{name}: stratum {index} must be a non-empty list of numbers, "
                f"e.g. [[0.2, 0.5, 0.4]] for one task of three runs"
            )
        if not np.all(np.isfinite(array)):
            raise ValueError(f"{name}: stratum {index} has a non-finite value")
        samples.append(array)
    return samples


def _stratified_bootstrap(
    samples: list[np.ndarray],
    statistic: Callable[..., np.ndarray],
    value: float,
    confidence: float,
    n_resamples: int,
    seed: int,
) -> Estimate:
    """Percentile interval of `statistic(*samples)`, each sample resampled on its own; samples
    that cannot vary (one value, or all values equal) are held fixed."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    varying = [i for i, sample in enumerate(samples) if np.ptp(sample) > 0]
    if not varying:
        return Estimate(value, value, value)

    def with_fixed(*resampled: np.ndarray, axis: int = -1) -> np.ndarray:
        batch = resampled[0].shape[:-1]
        full = [np.broadcast_to(sample, (*batch, sample.size)) for sample in samples]
        for index, sample in zip(varying, resampled, strict=True):
            full[index] = sample
        return statistic(*full, axis=-1)

    result = stats.bootstrap(
        [samples[i] for i in varying],
        with_fixed,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    interval = result.confidence_interval
    return Estimate(value, float(interval.low), float(interval.high))


def normalised_entropy(counts: Mapping[str, int], categories: Iterable[str] | None = None) -> float:
    """Shannon entropy of the counts divided by log(K), K the number of categories (the given
    ones, else the keys of `counts`): 1 for uniform use of all K, 0 for a single one; 0 when
    K < 2 or nothing was counted."""
    given = None if categories is None else list(categories)
    unknown = [name for name in counts if given is not None and name not in given]
    if unknown:
        raise ValueError(f"counts name categories {unknown} outside the given {given}")
    names = given if given is not None else list(counts)
    values = np.array([counts.get(name, 0) for name in names], dtype=float)
    if np.any(values < 0):
        raise ValueError(f"counts must be non-negative, got {dict(counts)}")
    total = values.sum()
    if len(names) < 2 or total == 0:
        return 0.0
    return float(stats.entropy(values / total) / math.log(len(names)))
