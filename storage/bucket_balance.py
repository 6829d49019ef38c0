"""Seed 003's Balance policy, on buckets: move work from the heaviest node to the lightest until the
nodes are as even as moving whole buckets can make them.

The input is a cost table (`storage.bucket_load`): per node, its buckets and each one's cost, a
share of the node's time. While the heaviest node's cost exceeds the lightest's by more than
`threshold`, the bucket of the heaviest node whose move narrows that gap the most (its cost
nearest half the gap, and below the whole gap) goes to the lightest node (from the next heaviest
when the heaviest has no such bucket); when no node has one, balancing stops. Each move lowers the
sum of the squared costs, so the loop ends. A node with no bucket (one just added) costs 0 and is
the first to take some.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.bucket_load import Bucket, Costs


@dataclass(frozen=True)
class BucketMove:
    table: str
    bucket: int
    source: str
    target: str
    cost: float


def balance(costs: Costs, nodes: list[str], threshold: float = 0.05) -> list[BucketMove]:
    """The moves that even out `costs` over `nodes` (every node that may hold buckets, those
    holding none included), in the order made. Buckets of nodes not in `nodes` (leaving) must be
    moved first (`storage.redistribution.spread`)."""
    held: dict[str, dict[Bucket, float]] = {node: dict(costs.get(node, {})) for node in nodes}
    load = {node: sum(buckets.values()) for node, buckets in held.items()}
    moves: list[BucketMove] = []
    limit = sum(len(buckets) for buckets in held.values())
    while len(moves) < limit and (move := _next_move(held, load, nodes, threshold)) is not None:
        del held[move.source][(move.table, move.bucket)]
        held[move.target][(move.table, move.bucket)] = move.cost
        load[move.source] -= move.cost
        load[move.target] += move.cost
        moves.append(move)
    return moves


def _next_move(
    held: dict[str, dict[Bucket, float]], load: dict[str, float], nodes: list[str], threshold: float
) -> BucketMove | None:
    """The move to the lightest node from the heaviest node that has a bucket narrowing their gap
    (the next heaviest when the heaviest has none), or None."""
    light = min(nodes, key=lambda n: (load[n], n))
    for heavy in sorted(nodes, key=lambda n: (-load[n], n)):
        gap = load[heavy] - load[light]
        if gap <= threshold:
            return None
        candidates = [(b, c) for b, c in held[heavy].items() if 0 < c < gap]
        if candidates:
            bucket, cost = min(candidates, key=lambda item: (abs(item[1] - gap / 2), item[0]))
            return BucketMove(bucket[0], bucket[1], heavy, light, cost)
    return None


def spread(costs: Costs, leaving: list[str], staying: list[str]) -> list[BucketMove]:
    """Every bucket of the `leaving` nodes, each to the `staying` node that is lightest when it
    moves (then the one holding fewest buckets), the costliest first (seed 000's removal of a node)."""
    load = {node: sum(costs.get(node, {}).values()) for node in staying}
    count = {node: len(costs.get(node, {})) for node in staying}
    moves = []
    items = [(cost, bucket, node) for node in leaving for bucket, cost in costs.get(node, {}).items()]
    for cost, bucket, node in sorted(items, key=lambda item: (-item[0], item[1])):
        target = min(staying, key=lambda n: (load[n], count[n], n))
        load[target] += cost
        count[target] += 1
        moves.append(BucketMove(bucket[0], bucket[1], node, target, cost))
    return moves
