"""SQL: a query's run phase in four steps, each in a module of its own, put together for a region
by `engine`:

1. `check`: parse (`parse`, with the DuckDB-compatible names of `names`), bind `params`, refuse
   what cannot run, qualify against the region's `catalog`, authorize; errors in `errors`.
2. `planner`: the regular plan (`plan.Plan`, a description that runs nothing), by the strategies
   `constant` and `one_table`, or the rewrite passes of `passes` in the order of `planner.RULES`,
   over `tree` helpers, SQL expressions turned into the nodes' typed scan requests by `translate`,
   and the Spark text of `spark_dialect`.
3. `stage`: what must run before the final plan: subqueries answered first, semi-join reduction
   (`reduce`, over the key sets of `keysets`, filters written by `request`), joins already done
   left out (`eliminate`).
4. `execute`: at the coordinator over the nodes' scans (`local`), or on Spark, the sub-queries
   handed over by `exchange`.
"""
