"""Co-located joins (seed 001: tables declustered on their join key, small ones replicated; seed 002:
partial, reduce, final): a query whose hash-placed tables share one placement (the same buckets
read by the same nodes, hashed over one key column of one type) and are joined on that key, with
any replicated tables, is answered by every such node over its own buckets, and the coordinator
merges what the nodes return (`gateway.sql.decompose`). `co_locate` says whether that is exact:
whether every row the query's SELECTs combine comes from one node.

It is exact where, in every SELECT,
- the hash-placed tables (and derived tables or common table expressions over them) are joined on
  their keys: by inner joins (equalities in WHERE or ON, chained through any column), by an outer
  join whose NULL-extended side is joined on the key in its ON (a hash-placed table preserved
  against a replicated one is fine; a replicated one preserved against a hash-placed one is not);
- a subquery over hash-placed tables is correlated on the key (EXISTS, NOT EXISTS, a scalar), or is
  an uncorrelated ``key IN (SELECT key ...)`` whose subquery keeps whole groups of keys;
- a derived table or common table expression over them keeps each key's rows whole (no aggregate
  but grouped by the key, a window only partitioned by it, no LIMIT, no DISTINCT without the key)
  and returns the key when it is joined.

The SELECT that is split (the top one; or, when that fails, the one derived table the top SELECT
alone reads, which then runs at the coordinator over its merged rows) may also preserve replicated
rows against hash-placed ones in an outer join when it aggregates in parts and reads the
NULL-extended side only in that join's ON and as the argument of its aggregates: each matched row
is on one node, and a row unmatched on one node adds nothing to COUNT, SUM, AVG, MIN or MAX of a
NULL, only its group, which every node has (it is grouped by the preserved side alone).

Anything else runs on Spark whole, and the plan says why (`CoLocation.why`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from gateway.sql.aggregate_parts import partials
from gateway.sql.catalog import RegionCatalog, TableInfo
from gateway.sql.tree import nullable_aliases, split_and

ColumnRef = tuple[str, str]  # (table alias, column)


@dataclass(frozen=True)
class Layout:
    """The placement co-located tables share: which buckets each node reads, and the key's type."""

    buckets: int
    reads: tuple[tuple[str, tuple[int, ...]], ...]  # (node, the buckets it reads)
    key_type: str

    @classmethod
    def of(cls, info: TableInfo) -> Layout | str:
        placement = info.schema.placement
        if len(placement.keys) != 1:
            return f"{info.schema.name} is hash-placed on several columns"
        if not placement.owners:
            return f"{info.schema.name}'s buckets have no owners"
        if info.buckets is not None:  # replicas: the catalog chose a holder of each bucket
            reads = sorted(info.buckets.items())
        else:  # each bucket read where its owner is (after a move: where it moved)
            owned = {node: tuple(b for b, owner in enumerate(placement.owners) if owner == node) for node in info.nodes}
            reads = sorted((node, buckets) for node, buckets in owned.items() if buckets)
        return cls(placement.buckets, tuple(reads), info.schema.column(placement.keys[0]).type)

    @property
    def nodes(self) -> list[str]:
        return [node for node, _ in self.reads]


@dataclass
class CoLocation:
    """What `co_locate` found: `layout` and the co-located tables' keys when the query can run on
    every node; else `why` it cannot ("" when no table it reads is split between nodes)."""

    layout: Layout | None = None
    keys: dict[str, str] = field(default_factory=dict)  # co-located table -> its key column
    replicated: list[str] = field(default_factory=list)
    why: str = ""
    scope: Scope | None = None  # the SELECT split into parts ...
    grouping: set[ColumnRef] = field(default_factory=set)  # ... and its columns that are its rows' key
    outer: Scope | None = None  # the top SELECT over it, run at the coordinator (None: it is the top)


@dataclass
class Part:
    """One scope, as co-location sees it."""

    split: bool  # it reads hash-placed rows (else only replicated ones: the same on every node)
    key: set[ColumnRef] = field(default_factory=set)  # the columns equal to the key
    outer: set[ColumnRef] = field(default_factory=set)  # ... of them, the enclosing scopes' (a correlation)
    # ... of them, those whose value is their row's key: not on the NULL-extended side of an outer join,
    # whose NULL is on every node (what groups, windows and DISTINCT may keep whole by)
    grouping: set[ColumnRef] = field(default_factory=set)
    outputs: set[str] = field(default_factory=set)  # output names that are the key
    whole: str = ""  # why each key's rows are not whole in its output ("" when they are)


class _Classes:
    """Columns known equal, as a union-find."""

    def __init__(self) -> None:
        self.parent: dict[ColumnRef, ColumnRef] = {}

    def find(self, column: ColumnRef) -> ColumnRef:
        while (up := self.parent.setdefault(column, column)) != column:
            column = self.parent[column] = self.parent.setdefault(up, up)
        return column

    def union(self, one: ColumnRef, other: ColumnRef) -> None:
        self.parent[self.find(one)] = self.find(other)

    def members(self, roots: set[ColumnRef]) -> set[ColumnRef]:
        return {c for c in list(self.parent) if self.find(c) in roots}


class _Apart(Exception):
    """Why the query cannot be answered on every node over its own buckets."""


def co_locate(tree: exp.Expression, catalog: RegionCatalog, below: bool = False) -> CoLocation:
    """Whether every node holding buckets of `tree`'s hash-placed tables can answer it over its own
    buckets, each SELECT's rows whole on one node (see the module's rules); its top SELECT split,
    or with `below` the one derived table the top SELECT reads (else why not)."""
    scopes = traverse_scope(tree)
    outer = None
    if below:
        outer, target = scopes[-1], _derived_below(scopes[-1])
        if target is None:
            return CoLocation(why="the top SELECT reads more than one derived table")
        scopes = scopes[:-1]  # every scope but the top one is the derived table's
    found = CoLocation()
    parts: dict[int, Part] = {}
    try:
        for scope in scopes:
            parts[id(scope)] = _part(scope, parts, catalog, found, scope is scopes[-1])
        if found.layout is None:
            return found
        nodes = set(found.layout.nodes)
        missing = [name for name in found.replicated if not nodes <= set(catalog.table(name).nodes)]
        if missing:
            raise _Apart(f"{', '.join(missing)} is not on every node holding buckets of {', '.join(found.keys)}")
    except _Apart as e:
        return CoLocation(why=str(e), keys=found.keys)
    found.scope, found.grouping, found.outer = scopes[-1], parts[id(scopes[-1])].grouping, outer
    return found


def _derived_below(top: Scope) -> Scope | None:
    """The scope of the one derived table `top` reads, if that is all it reads (no join, no
    subquery, no common table expression)."""
    select = top.expression
    if not isinstance(select, exp.Select) or select.args.get("with_") or select.args.get("joins"):
        return None
    if top.subquery_scopes or len(top.selected_sources) != 1:
        return None
    _, source = next(iter(top.selected_sources.values()))
    return source if isinstance(source, Scope) and isinstance(source.expression, exp.Select) else None


def _part(scope: Scope, parts: dict[int, Part], catalog: RegionCatalog, found: CoLocation, split: bool) -> Part:
    """The `Part` of `scope`, its inner scopes done; `split`: it is the SELECT split into parts."""
    select = scope.expression
    if not isinstance(select, exp.Select):
        if any(parts[id(s)].split for s in scope.set_operation_scopes):
            raise _Apart("a set operation over hash-placed tables")
        return Part(False)
    splits: dict[str, set[str]] = {}  # split source alias -> its columns that are the key
    for alias, (_, source) in scope.selected_sources.items():
        if isinstance(source, exp.Table):
            key = _table(catalog.table(source.name), found)
            if key is not None:
                splits[alias] = {key}
        elif isinstance(source, Scope):
            inner = parts[id(source)]
            if inner.split:
                if inner.whole:
                    raise _Apart(f"{alias}: {inner.whole}")
                splits[alias] = inner.outputs
        else:
            raise _Apart(f"{alias} is neither a table nor a query")
    extended = _joins(select, splits, split)
    if extended and (why := _preserving(scope, extended)):
        raise _Apart(why)
    classes = _Classes()
    for one, other in _conditions(select):
        classes.union(one, other)
    key = _linked(splits, classes)
    for sub in scope.subquery_scopes:
        inner = parts[id(sub)]
        if inner.split and not (inner.outer & key) and not _in_by_key(sub, inner, key):
            text = sub.expression.sql()[:120]
            raise _Apart(f"a subquery over hash-placed tables not correlated on their key: ({text})")
    if not splits:
        return Part(False)
    outer = {column for column in key if column[0] not in scope.sources}
    nullable = nullable_aliases(select)
    grouping = {column for column in key if column[0] not in nullable}
    return Part(True, key, outer, grouping, _key_outputs(select, grouping), _not_whole(scope, grouping))


def _table(info: TableInfo, found: CoLocation) -> str | None:
    """A table's key column when it is co-located with the query's others (None: replicated)."""
    if info.replicated:
        if info.schema.name not in found.replicated:
            found.replicated.append(info.schema.name)
        return None
    layout = Layout.of(info)
    if isinstance(layout, str):
        raise _Apart(layout)
    if found.layout is None:
        found.layout = layout
    elif layout != found.layout:
        first = next(iter(found.keys))
        raise _Apart(f"{info.schema.name} and {first} are not placed alike (buckets, nodes or key type differ)")
    key = info.schema.placement.keys[0]
    found.keys.setdefault(info.schema.name, key)
    return key


def _conditions(select: exp.Select) -> list[tuple[ColumnRef, ColumnRef]]:
    """The column equalities every row of `select` satisfies: WHERE's and every join's ON (an outer
    join's hold for its matched rows, and `_joins` checked its unmatched ones)."""
    conditions = split_and(select.args["where"].this) if select.args.get("where") else []
    for join in select.args.get("joins") or []:
        conditions += split_and(join.args.get("on"))
    return [pair for c in conditions if (pair := _equality(c)) is not None]


def _equality(condition: exp.Expression) -> tuple[ColumnRef, ColumnRef] | None:
    one, other = condition.this, condition.expression
    if isinstance(condition, exp.EQ) and isinstance(one, exp.Column) and isinstance(other, exp.Column):
        return (one.table, one.name), (other.table, other.name)
    return None


def _joins(select: exp.Select, splits: dict[str, set[str]], split: bool) -> dict[str, exp.Join]:
    """Refuses a semi or anti join written as such, and an outer join that is not exact on each
    node: one whose split sides are not joined on the key in its ON, or one preserving replicated
    rows against split ones (unmatched on every node) unless `split` (then `_preserving` decides:
    the aliases NULL-extended so, each with its join, are returned)."""
    seen = [select.args["from_"].this.alias_or_name] if select.args.get("from_") else []
    extended: dict[str, exp.Join] = {}
    for join in select.args.get("joins") or []:
        alias, side = join.this.alias_or_name, (join.side or "").upper()
        if (join.kind or "").upper() in ("SEMI", "ANTI"):
            raise _Apart(f"a {join.kind} JOIN")
        mine, left = alias in splits, [a for a in seen if a in splits]
        if side:
            preserving = (side == "LEFT" and mine and not left) or (side == "RIGHT" and left and not mine)
            if preserving and not split:
                raise _Apart(f"a {side} JOIN preserving replicated rows against hash-placed ones")
            if preserving:
                extended.update(dict.fromkeys([alias] if side == "LEFT" else seen, join))
            if side == "FULL" and mine != bool(left):
                raise _Apart("a FULL JOIN of hash-placed rows with replicated ones")
            on = [pair for c in split_and(join.args.get("on")) if (pair := _equality(c)) is not None]
            if mine and left and not _on_key(on, alias, splits, left):
                raise _Apart(f"a {side} JOIN of {alias} not on the key of the hash-placed tables")
        seen.append(alias)
    return extended


def _preserving(scope: Scope, extended: dict[str, exp.Join]) -> str:
    """Why replicated rows preserved against the `extended` sides (NULL-extended where a node has
    no match, though another may have one) make `scope`'s partial aggregates inexact ("" when they
    do not): unless it aggregates in parts, grouped by the preserved side alone, and reads an
    extended side only in its join's ON and as the argument of an aggregate that ignores NULLs
    (COUNT(*) counts a row unmatched on each node; a SUM of a preserved column adds it once a node)."""
    refused = f"a {next(iter(extended.values())).side} JOIN preserving replicated rows against hash-placed ones"
    select = scope.expression
    found = partials(select) if split_groups(scope, set()) else None
    if not found:
        return f"{refused}, not aggregated"
    read = {id(c) for join in extended.values() for c in join.args["on"].find_all(exp.Column)}
    for partial in found:
        function = partial.this if isinstance(partial, exp.Filter) else partial
        argument = function.this
        if isinstance(argument, exp.Column) and argument.table in extended:
            read.add(id(argument))
        elif not isinstance(function, exp.Min | exp.Max):
            return f"{refused}: {function.sql()} counts a preserved row on every node"
    for column in scope.columns:
        if column.table in extended and id(column) not in read:
            return f"{refused}: {column.sql()} read outside an aggregate's argument"
    for sub in scope.subquery_scopes:
        if any(c.table in extended for c in sub.external_columns):
            return f"{refused}: a subquery reads {', '.join(sorted(extended))}"
    return ""


def _on_key(on: list[tuple[ColumnRef, ColumnRef]], alias: str, splits: dict[str, set[str]], left: list[str]) -> bool:
    mine = {(alias, c) for c in splits[alias]}
    theirs = {(a, c) for a in left for c in splits[a]}
    return any({one, other} & mine and {one, other} & theirs for one, other in on)


def _linked(splits: dict[str, set[str]], classes: _Classes) -> set[ColumnRef]:
    """The columns equal to the key of every split source (all of them joined on it); a lone split
    source need not return its key (its rows are each node's own)."""
    if not splits or (len(splits) == 1 and not next(iter(splits.values()))):
        return set()
    common: set[ColumnRef] | None = None
    for alias, columns in splits.items():
        if not columns:
            raise _Apart(f"{alias} does not return the key of its hash-placed tables")
        roots = {classes.find((alias, c)) for c in columns}
        common = roots if common is None else common & roots
        if not common:
            raise _Apart(f"{alias} is not joined on the key of the other hash-placed tables")
    return classes.members(common)


def _in_by_key(sub: Scope, inner: Part, key: set[ColumnRef]) -> bool:
    """Whether `sub` is the subquery of ``column IN (...)`` that filters rows (a NULL another node's
    subquery returns changes false into NULL: the same to a filter), the column equal to the key,
    the subquery's output the key with each key's rows whole."""
    holder = sub.expression.parent
    user = holder.parent if isinstance(holder, exp.Subquery) else holder
    if not isinstance(user, exp.In) or user.args.get("query") is not holder or not _filters(user):
        return False
    tested = user.this
    outputs = sub.expression.expressions
    return (
        isinstance(tested, exp.Column)
        and (tested.table, tested.name) in key
        and not inner.whole
        and len(outputs) == 1
        and outputs[0].alias_or_name in inner.outputs
    )


def _filters(node: exp.Expression) -> bool:
    """Whether `node` is a conjunct of a WHERE, HAVING or ON."""
    while isinstance(node.parent, exp.And | exp.Paren):
        node = node.parent
    return isinstance(node.parent, exp.Where | exp.Having) or (
        isinstance(node.parent, exp.Join) and node.arg_key == "on"
    )


def _key_outputs(select: exp.Select, key: set[ColumnRef]) -> set[str]:
    return {p.alias_or_name for p in select.expressions if is_key(p.unalias(), key)}


def is_key(node: exp.Expression, key: set[ColumnRef]) -> bool:
    """Whether `node` is a column equal to the key."""
    return isinstance(node, exp.Column) and (node.table, node.name) in key


def grouping_sets(select: exp.Select) -> bool:
    group = select.args.get("group")
    return group is not None and any(group.args.get(a) for a in ("grouping_sets", "cube", "rollup"))


def unkeyed_window(scope: Scope, key: set[ColumnRef]) -> bool:
    """Whether a window of `scope` is not partitioned by the key."""
    windows = scope.find_all(exp.Window)
    return any(not any(is_key(p, key) for p in w.args.get("partition_by") or []) for w in windows)


def split_groups(scope: Scope, key: set[ColumnRef]) -> bool:
    """Whether `scope` aggregates over groups not grouped by the key (split between nodes)."""
    group = scope.expression.args.get("group")
    aggregated = group is not None or any(
        isinstance(n, exp.AggFunc) and not isinstance(n.parent, exp.Window) for n in scope.find_all(exp.AggFunc)
    )
    return aggregated and not (group is not None and any(is_key(k, key) for k in group.expressions))


def _not_whole(scope: Scope, key: set[ColumnRef]) -> str:
    """Why a split SELECT's output does not keep each key's rows whole ("" when it does)."""
    select = scope.expression
    if grouping_sets(select):
        return "grouping sets over rows split between nodes"
    if split_groups(scope, key):
        return "an aggregate over groups split between nodes"
    if unkeyed_window(scope, key):
        return "a window not partitioned by the key"
    if select.args.get("limit") or select.args.get("offset"):
        return "a LIMIT over rows split between nodes"
    if select.args.get("distinct") is not None and not _key_outputs(select, key):
        return "a DISTINCT over rows split between nodes"
    return ""
