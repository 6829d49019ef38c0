"""Balancing between regions: the weight W_r on hand-made queues, each method's moves, and the
cross-simulation of seed 004 §5.2 (no query lost; the published rows reproduced)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from regions import Centralized, Decentralized, Experiment, IdlePull, NoBalancing, method, simulate
from regions.balancing import PUBLISHED, RegionQueue, Waiting, weight_as_printed, weight_per_server
from regions.cross_figures import TABLE_5_7
from regions.region_load import OverloadWatch

SCALE = PUBLISHED  # 15 GB, 3 servers


def _region(number: int, *queries: tuple[int, float, float]) -> RegionQueue:
    region = RegionQueue(number, servers=number)
    for origin, volume, seconds in queries:
        region.push(Waiting(origin, volume, seconds))
    return region


def test_the_weight_is_the_formula_on_a_hand_made_queue() -> None:
    """W_r = Σ V_σ / (L_r · V_max) · n_max / n_r as printed; without L_r, per server."""
    region = _region(2, (1, 3.21, 132.4), (3, 13.94, 136.0))  # a query of region 1 and one of region 3
    assert weight_as_printed(region, SCALE) == pytest.approx((3.21 + 13.94) / (2 * 15.0) * 3 / 2)
    assert weight_per_server(region, SCALE) == pytest.approx((3.21 + 13.94) / 15.0 * 3 / 2)
    assert region.volume == pytest.approx(17.15) and region.work == pytest.approx(268.4)
    region.pop_head()
    assert weight_as_printed(region, SCALE) == pytest.approx(13.94 / 15.0 * 3 / 2)
    region.pop_tail()
    assert weight_as_printed(region, SCALE) == 0.0 and region.volume == region.work == 0.0
    assert weight_as_printed(_region(3, (3, 9.74, 1.0)), SCALE) == pytest.approx(9.74 / 15.0)


def test_centralized_moves_the_tail_of_heavy_queues_to_the_lightest() -> None:
    heavy = _region(1, (1, 4.0, 1.0), (1, 4.5, 1.0))  # W = 4.25 / 15 * 3
    light = _region(3, (3, 1.0, 1.0))  # W = 1 / 15
    empty = _region(2)  # W = 0: the lightest
    moves = Centralized(weight_as_printed, SCALE).rebalance([heavy, light, empty])
    assert [(m.source, m.target, m.query.volume) for m in moves] == [(1, 2, 4.5)]  # its tail
    assert [q.volume for q in heavy.queue] == [4.0] and empty.queue[0].moved


def test_decentralized_pulls_the_head_of_the_heaviest_when_its_queue_is_empty() -> None:
    one = _region(1, (1, 3.0, 1.0), (1, 4.0, 1.0))  # W = 3.5 / 15 * 3 = 0.7
    two = _region(2, (2, 8.0, 1.0))  # W = 8 / 15 * 1.5 = 0.8: the heaviest
    idle = _region(3)
    moves = Decentralized(weight_as_printed, SCALE).rebalance([one, two, idle])
    assert [(m.source, m.target, m.query.volume) for m in moves] == [(2, 3, 8.0)]
    again = Decentralized(weight_as_printed, SCALE).rebalance([one, two, idle])  # now region 2's is empty
    assert [(m.source, m.target, m.query.volume) for m in again] == [(1, 2, 3.0)]  # 0.7 > 8 / 15 (region 3)


def test_idle_pull_runs_its_own_first_then_the_heaviest_head_worth_the_round_trip() -> None:
    own = _region(1, (1, 1.0, 10.0))
    other = _region(2, (2, 8.0, 30.0), (2, 9.0, 30.0))
    pulling = IdlePull(weight_as_printed, SCALE, round_trip=0.5)
    assert pulling.take(own, [own, other]).origin == 1  # its own queue first
    taken = pulling.take(own, [own, other])
    assert (taken.origin, taken.volume, taken.moved) == (2, 8.0, True)  # the head, not the tail
    other.committed = 0.0
    short = _region(3, (3, 1.0, 0.2))  # waits 0.2 s per server: not worth a 0.5 s round trip
    assert pulling.take(own, [own, short]) is None
    assert NoBalancing().take(own, [own, other]) is None


def test_methods_are_chosen_by_name() -> None:
    assert [method(n).name for n in ("none", "centralized", "decentralized", "idle-pull")] == [
        "none",
        "centralized",
        "decentralized",
        "idle-pull",
    ]
    with pytest.raises(ValueError, match="balancing method"):
        method("random")
    with pytest.raises(ValueError, match="weight"):
        method("centralized", weight="mean")


@pytest.mark.parametrize("name", ["none", "centralized", "decentralized", "idle-pull"])
def test_no_query_is_lost_or_counted_twice_in_the_simulation(name: str) -> None:
    experiment = Experiment(days=1, warm_up_days=0)
    outcome = simulate(experiment, method(name, scale=experiment.scale()), seed=7)
    assert sum(outcome.sent.values()) == sum(outcome.finished.values()) + outcome.unfinished
    assert outcome.finished == {r: sum(hours) for r, hours in outcome.hourly.items()}
    again = simulate(experiment, method(name, scale=experiment.scale()), seed=7)
    assert again.finished == outcome.finished  # one seed, one answer


def test_the_published_rows_without_balancing_and_decentralized_are_reproduced() -> None:
    """Counts of whole 3-day runs (docs/regions.md): each region within 5% of Table 5.7."""
    experiment = Experiment()
    for name in ("none", "decentralized"):
        outcome = simulate(experiment, method(name, scale=experiment.scale()), seed=1)
        for r, published in enumerate(TABLE_5_7[name], start=1):
            assert outcome.finished[r] == pytest.approx(published, rel=0.05), (name, r)


class _Queue:
    """A region's queue summary, set by hand (`regions.region_load.QueueView.summary`'s shape)."""

    number = 1
    config = SimpleNamespace(gateway=SimpleNamespace(url="http://127.0.0.1:8080"))

    def __init__(self) -> None:
        self.queue: list[list[float]] = []

    def summary(self) -> dict:
        return {"number": 1, "servers": 2, "running": 0, "mean_seconds": 1.0, "queue": self.queue}


def test_a_region_reports_overload_once_its_weight_stays_above_the_threshold(caplog) -> None:
    view = _Queue()
    watch = OverloadWatch(view, threshold=1.0, seconds=5.0)
    view.queue = [[1.5, 1.0, 1], [1.0, 1.0, 1]]  # 2.5 queued per 2 servers: 1.25
    assert not watch.look(now=100.0) and watch.weight == pytest.approx(1.25)
    assert not watch.look(now=104.0)  # above for 4 s of 5
    assert watch.look(now=105.0) and watch.reports == 1
    assert "region 1 is overloaded" in caplog.text and "cxg redistribute --rebalance" in caplog.text
    assert watch.look(now=200.0) and watch.reports == 1  # one report per stay above
    view.queue = [[1.0, 1.0, 1]]  # 0.5 per server
    assert not watch.look(now=201.0) and watch.above_since is None
    view.queue = [[3.0, 1.0, 1]]
    assert not watch.look(now=202.0)  # above again: the time counts from here
    assert watch.look(now=207.0) and watch.reports == 2
