"""SQL: parsing, the regular plan, and its execution on storage nodes and Spark.

Parsing and checking: `parse` (with `params`), errors in `errors`. Planning, which runs nothing:
`planner` (the strategies `constant`, `one_table`, and the rewrite passes of `passes` in the order
of `planner.RULES`) builds a `plan.Plan`, over `tree` helpers, SQL expressions turned into the
nodes' typed scan requests (`storage.scan_protocol`) by `translate`, and the Spark text of
`spark_dialect`; `request` writes the semi-join filters. Running consumes plans: `run` (subqueries
answered first, staging into a `staged.Staged` plan through `reduce` and `eliminate`, Spark
through `exchange`, join-key sets in `keysets`), `local` at the coordinator. Both read the
region's tables through `catalog`; `engine` puts the two together for a region.
"""
