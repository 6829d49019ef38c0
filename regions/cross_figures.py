"""The cross-simulation's runs summarized per method, beside the published Tables 5.7 and 5.8:
the figures `cxg simulate regions` prints, writes as JSON and plots, and the live benchmark compares with."""

from __future__ import annotations

import statistics
from typing import Any

from regions.cross_simulation import Experiment, Outcome

# seed 004, Table 5.7: queries processed "per day" per region (the counts of whole 3-day runs)
TABLE_5_7 = {
    "none": (7152, 7297, 7212),
    "centralized": (13130, 10369, 9387),
    "decentralized": (16812, 9314, 8845),
}


def method_figures(outcomes: dict[str, list[Outcome]], experiment: Experiment) -> dict[str, Any]:
    """Per method: the mean over runs of each region's count, gain over no balancing, mean
    response time (measured days), share of queries run elsewhere; the published beside."""
    regions = range(1, experiment.regions + 1)
    base = {r: statistics.fmean(o.finished[r] for o in outcomes["none"]) for r in regions}
    methods = {}
    for name, runs in outcomes.items():
        finished = {r: statistics.fmean(o.finished[r] for o in runs) for r in regions}
        measured = sum(sum(o.measured.values()) for o in runs)
        response = sum(o.response[r] * o.measured[r] for o in runs for r in regions) / measured
        methods[name] = {
            "finished": [finished[r] for r in regions],
            "total": sum(finished.values()),
            "per_measured_day": measured / len(runs) / (experiment.days - experiment.warm_up_days),
            "gain_pct": [100 * (finished[r] / base[r] - 1) for r in regions],
            "total_gain_pct": 100 * (sum(finished.values()) / sum(base.values()) - 1),
            "mean_response_s": response,
            "response_s": [statistics.fmean(o.response[r] for o in runs) for r in regions],
            "moved_pct": 100 * sum(o.moved for o in runs) / sum(sum(o.finished.values()) for o in runs),
            "busy_pct": 100 * statistics.fmean(o.busy for o in runs),
            "hourly": [
                [statistics.fmean(o.hourly[r][h] for o in runs) for h in range(experiment.days * 24)] for r in regions
            ],
        }
        if name in TABLE_5_7:
            published = TABLE_5_7[name]
            methods[name]["published"] = list(published)
            methods[name]["published_total"] = sum(published)
            methods[name]["published_gain_pct"] = [
                100 * (p / b - 1) for p, b in zip(published, TABLE_5_7["none"], strict=True)
            ]
            methods[name]["off_pct"] = [
                100 * (f / p - 1) for f, p in zip(methods[name]["finished"], published, strict=True)
            ]
    return {"experiment": experiment.__dict__, "methods": methods}
