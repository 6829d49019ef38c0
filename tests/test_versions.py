"""Table versions, generated: any sequence of loads (under any placement), releases and reads on a
store keeps every kept version readable as it was loaded, and no file of any other; the gateway's
catalog serves, whatever each node holds, the newest version every bucket's holder has."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.sql.catalog import _choose, _Held
from storage import Placement, Store, TableSchema, load_table
from storage.errors import VersionGoneError
from storage.manifest import read_manifest

PLACEMENTS = ["replicated", "hash(k)", "hash(k) replicas 2", "hash(v)"]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("load"), st.integers(1, 60), st.sampled_from(PLACEMENTS)),
        st.tuples(st.just("release"), st.integers(1, 8), st.just("")),
    ),
    min_size=1,
    max_size=10,
)


def _rows(n: int, seed: int) -> pa.Table:
    return pa.table({"k": pa.array(range(n), pa.int64()), "v": pa.array([seed] * n, pa.int64())})


@settings(max_examples=40, deadline=None)
@given(ops)
def test_kept_versions_read_as_loaded_and_nothing_else_stays_on_disk(steps) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stores = [Store(Path(tmp) / f"n{i}", node=f"node-{i}") for i in range(2)]
        loaded: dict[int, pa.Table] = {}
        for step, (op, n, placement) in enumerate(steps):
            if op == "load":
                table = _rows(n, step)
                schema = TableSchema.from_arrow("t", table.schema, placement=Placement.parse(placement, 4))
                version = load_table(stores, schema, table)[0].version
                assert all(s.versions("t")[-1] == version for s in stores), "one version number on every node"
                loaded[version] = table
            elif loaded:
                for s in stores:
                    s.release("t", n)
                if n != max(loaded):
                    loaded.pop(n, None)
            for version, table in loaded.items():
                parts = [s.table("t", version).to_arrow() for s in stores]
                kind = stores[0].table("t", version).schema.placement
                read = parts[0] if kind.kind == "replicated" else _union(parts, kind)
                assert read.sort_by("k").equals(table.sort_by("k")), f"version {version} reads as loaded"
            for s in stores:
                if loaded:
                    assert s.versions("t") == sorted(loaded)
                    for gone in set(range(1, max(loaded))) - set(loaded):
                        with pytest.raises(VersionGoneError):
                            s.table("t", gone)
                    _only_kept_files(s)


def _union(parts: list[pa.Table], placement: Placement) -> pa.Table:
    """The rows of a hash-placed table, each bucket once (a replica's copy left out)."""
    union = pa.concat_tables(parts)
    if placement.replicas == 1:
        return union
    return union.group_by(["k", "v"]).aggregate([]).select(["k", "v"])


def _only_kept_files(store: Store) -> None:
    directory = store.table_dir("t")
    kept = {b.file for v in store.versions("t") for b in store.table("t", v).blocks}
    blocks = {p.name for p in directory.iterdir() if p.name.endswith((".arrow", ".arrow.zst"))}
    assert blocks == kept, "a block file of no kept version stays on disk"
    assert read_manifest(directory) is not None


holdings = st.dictionaries(
    st.sampled_from(["node-0", "node-1", "node-2"]),
    st.sets(st.integers(1, 4), max_size=4),
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(holdings, st.sampled_from(["replicated", "hash(k)", "hash(k) replicas 2"]))
def test_the_catalog_serves_the_newest_version_every_bucket_holder_has(held_by, placement_text) -> None:
    nodes = ["node-0", "node-1", "node-2"]
    placement = Placement.parse(placement_text, 6)
    if placement.kind == "hash":
        placement = placement.with_owners(nodes)
    schema = TableSchema.from_arrow("t", _rows(1, 0).schema, placement=placement)
    held: dict[tuple[str, int], list[_Held]] = {}
    for node, versions in held_by.items():
        for version in versions:
            held.setdefault(("t", version), []).append(_Held(node, 10))
    schemas = {key: schema for key in held}
    if not held:
        return
    info = _choose(held, schemas)["t"]

    def complete(version: int) -> bool:
        up = {h.node for h in held.get(("t", version), [])}
        if placement.kind == "replicated":
            return bool(up)
        return all(set(placement.holders(b)) & up for b in range(placement.buckets))

    complete_versions = [v for (_, v) in held if complete(v)]
    if not complete_versions:
        assert not info.available and "bucket" in info.missing
        return
    assert info.available and info.version == max(complete_versions)
    if info.buckets is not None:  # replicas: every bucket read once, from a node that holds it
        read = [b for buckets in info.buckets.values() for b in buckets]
        assert sorted(read) == list(range(placement.buckets))
        assert all(node in placement.holders(b) for node, buckets in info.buckets.items() for b in buckets)


def test_one_version_number_committed_by_two_loads_is_not_served() -> None:
    """Two loads of one table at once can each commit version 2 on some of the nodes before both
    fail and are undone: meanwhile the gateway serves version 1, never a mix of the two."""
    schema = TableSchema.from_arrow("t", pa.schema([("k", pa.int64())]), placement=Placement.parse("hash(k)", 2))
    schema = replace(schema, placement=schema.placement.with_owners(["node-0", "node-1"]))
    held = {
        ("t", 1): [_Held("node-0", 5), _Held("node-1", 5)],
        ("t", 2): [_Held("node-0", 7, "loadaaaaaaaa"), _Held("node-1", 9, "loadbbbbbbbb")],
    }
    chosen = _choose(held, {("t", 1): schema, ("t", 2): schema})["t"]
    assert (chosen.version, chosen.rows, chosen.available) == (1, 10, True)
