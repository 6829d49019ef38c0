"""The fault report: a two-node region of real processes serving TPC-H, faults injected one after
another while clients query, and what the clients got.

    python -m benchmarks.bench_faults --sf 0.1 --json docs/bench/faults_sf0.1.json

Each fault is one of `benchmarks.faults`; `--fault NAME` runs one alone. The right answers are
DuckDB's over the same data. Must be 0: wrong answers, errors that are not retryable, queries lost
(sent and never answered), statement ids that answered twice.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from benchmarks import faults
from benchmarks.common import parser
from loadtests import console, print_table, write_json

FAULTS = {
    "node": lambda region, expected, files: faults.kill_node(region, expected),
    "node-hung": lambda region, expected, files: faults.hang_node(region, expected),
    "scan-worker": lambda region, expected, files: faults.kill_scan_worker(region, expected),
    "spark": lambda region, expected, files: faults.kill_spark(region, expected),
    "gateway": lambda region, expected, files: faults.kill_gateway(region, expected),
    "load": lambda region, expected, files: faults.kill_load(region, expected),
    "disk-full": lambda region, expected, files: faults.fill_disk(region, expected, files),
    "disk-full-spark": lambda region, expected, files: faults.fill_disk(region, expected, files, engine="spark"),
    "reload": lambda region, expected, files: faults.reload_under_load(region, expected, files),
}


def _row(name: str, report: faults.Report) -> dict[str, Any]:
    during, after = report.during.outcomes, report.after.outcomes
    retryable = Counter({k.split(":", 1)[1]: n for k, n in during.items() if k.startswith("retryable:")})
    return {
        "fault": name,
        "injected": report.fault,
        "queries": sum(during.values()),
        "right": during["right"],
        "retryable": dict(retryable),
        "wrong": during["wrong"] + after["wrong"],
        "errors": sum(n for k, n in (during + after).items() if k.startswith("error:")),
        "lost": during["lost"] + after["lost"],
        "twice": report.during.twice + report.after.twice,
        "after": f"{after['right']}/{sum(after.values())}",
        "notes": report.notes,
        "examples": (report.during.wrong + report.after.wrong)[:3],
    }


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0], default_sf=0.1)
    p.add_argument("--fault", choices=sorted(FAULTS), action="append", help="run only these (repeatable)")
    args = p.parse_args(argv)
    chosen = args.fault or list(FAULTS)
    rows = []
    with faults.serving_tpch(args.sf) as (region, files, expected):
        for name in chosen:
            with console.status(f"fault: {name}"):
                rows.append(_row(name, FAULTS[name](region, expected, files)))
            console.print(rows[-1])
    print_table(
        f"Faults on a two-node region, TPC-H SF {args.sf:g}: what clients got while each lasted",
        ["fault", "queries", "right", "retryable errors", "wrong", "other errors", "lost", "twice", "after: right"],
        [
            (
                r["injected"],
                r["queries"],
                r["right"],
                ", ".join(f"{code} {n}" for code, n in sorted(r["retryable"].items())) or "-",
                r["wrong"],
                r["errors"],
                r["lost"],
                r["twice"],
                r["after"],
            )
            for r in rows
        ],
    )
    write_json(args.json, {"sf": args.sf, "faults": rows})


if __name__ == "__main__":
    main()
