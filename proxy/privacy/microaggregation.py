"""The four release methods of seed 002 (SPEC §6), per cluster of one column.

The backend sorts a column and cuts it into clusters of k consecutive values (the last
absorbing the remainder); what reaches this module is each cluster's size, sum and its
three smallest and three largest values. From those: the released centroid and the
sensitivity its Laplace noise is calibrated to, with ε_a the column's share of ε (each
record is in one cluster, so every cluster gets the whole ε_a: parallel composition).

As in the paper, the clustering is treated as fixed: the sensitivities bound the
change of a centroid when one record of its cluster changes value *and stays in the
cluster* (tests/privacy/test_microaggregation_bruteforce.py enumerates exactly that).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from proxy.privacy.mechanisms import grid_step, laplace_real
from proxy.privacy.sampler import RandomSource
from proxy.privacy.sensitivity import winsorized_sum
from proxy.rules import domain_resolution

DP, DP_UM, IDP_LS, IDP_CBLS = "dp", "dp-um", "idp-ls", "idp-cbls"
METHODS = (DP, DP_UM, IDP_LS, IDP_CBLS)
MIN_K = {DP: 1, DP_UM: 1, IDP_LS: 1, IDP_CBLS: 3}  # CBLS drops two values per cluster
NEEDS_DOMAIN = (DP, DP_UM, IDP_LS)


@dataclass(frozen=True)
class Cluster:
    """One cluster's values as the backend summarised them: ``smallest`` holds the
    three smallest in order, ``largest`` the three largest in order (fewer when the
    cluster is smaller; a value may appear in both)."""

    size: int
    total: float
    smallest: tuple[float, ...]
    largest: tuple[float, ...]


def centroid(method: str, cluster: Cluster) -> float:
    """The mean; for CBLS the mean after the pre-processing of seed 002 §3.2.2 (the
    smallest value counted as the second smallest, the largest as the second largest)."""
    if method == IDP_CBLS:
        total = winsorized_sum(cluster.total, list(cluster.smallest[:2]),
                               list(cluster.largest[-2:]), cluster.size)
        return total / cluster.size
    return cluster.total / cluster.size


def sensitivity(method: str, cluster: Cluster, lower: float | None,
                upper: float | None) -> float:
    """How far the released centroid can move when one record of the cluster changes."""
    size = cluster.size
    if method in (DP, DP_UM):  # DP: a cluster of one record
        return (upper - lower) / size
    if method == IDP_LS:  # seed 002 Prop. 2
        return max(upper - cluster.smallest[0], cluster.largest[-1] - lower) / size
    # seed 002 Prop. 3 (x₁ ≤ x₂ ≤ x₃ the smallest, x″ₘ ≤ x′ₘ ≤ xₘ the largest)
    x1, x2, x3 = cluster.smallest
    far3, far2, top = cluster.largest
    raise_smallest = abs(top - x2) + abs(x3 - x2) + abs(top - far2)
    lower_largest = abs(x1 - far2) + abs(far3 - far2) + abs(x1 - x2)
    return max(raise_smallest, lower_largest) / size


def release(method: str, cluster: Cluster, lower: float | None, upper: float | None,
            epsilon: Fraction, rng: RandomSource) -> float:
    """The cluster's noisy centroid, clamped to the domain where one is given, on the
    grid of the domain's public resolution (never of the cluster's sensitivity)."""
    noisy = laplace_real(centroid(method, cluster), sensitivity(method, cluster, lower, upper),
                         epsilon, rng, grid_step(domain_resolution(lower, upper))).value
    if lower is not None:
        noisy = max(lower, noisy)
    if upper is not None:
        noisy = min(upper, noisy)
    return noisy
