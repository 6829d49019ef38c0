"""Loading into stores: placement, block sizing, versions, corruption and crash safety."""

from __future__ import annotations

import decimal
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_kernels import to_domain
from storage import (
    CorruptBlockError,
    DiskFullError,
    LoadOptions,
    Placement,
    SchemaError,
    Source,
    StorageError,
    Store,
    TableSchema,
    load_source,
    load_table,
    read_parquet,
)
from storage.block import record_size
from storage.errors import VersionGoneError
from storage.ingest import BlockStream, DirectoryTarget
from storage.partitioning import buckets_of
from storage.store import ORPHAN_AGE_S
from storage.tpch import schema_for
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[1]


def sample(rows: int = 5000, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    key = np.arange(rows, dtype=np.int64)
    day = rng.integers(0, 400, rows).astype(np.int32)
    cents = rng.integers(-(10**8), 10**8, rows).tolist()
    amount = pa.array([decimal.Decimal(c).scaleb(-2) for c in cents], pa.decimal128(12, 2))
    city = pa.array(rng.choice(["Москва", "Zürich", "東京", "Lima", None], rows).tolist(), pa.string())
    note = pa.array([f"note {i} " + "x" * int(i % 17) if i % 11 else None for i in range(rows)], pa.string())
    return pa.table(
        {
            "key": key,
            "day": pa.array(day, pa.int32()).cast(pa.date32()),
            "amount": amount,
            "city": city,
            "flag": pa.array(rng.random(rows) < 0.3),
            "note": note,
        }
    )


def schema_of(table: pa.Table, placement: str = "hash(key)", buckets: int = 4) -> TableSchema:
    return TableSchema.from_arrow("sales", table.schema, ("day", "city"), Placement.parse(placement, buckets))


def by_key(table: pa.Table) -> pa.Table:
    return table.sort_by("key")


def test_hash_placement_spreads_buckets_over_nodes_and_reads_back(tmp_path: Path) -> None:
    source = sample()
    stores = [Store(tmp_path / "n0", "node-0"), Store(tmp_path / "n1", "node-1")]
    load_table(stores, schema_of(source), source, LoadOptions(block_budget=20_000))
    parts = [s.table("sales").to_arrow() for s in stores]
    assert all(0 < p.num_rows < source.num_rows for p in parts)
    assert by_key(pa.concat_tables(parts)).equals(source)
    for i, store in enumerate(stores):
        table = store.table("sales")
        assert table.schema.placement.owners == ("node-0", "node-1", "node-0", "node-1")
        for entry, block in table.iter_blocks():
            assert entry.bucket % 2 == i
            data = block.decode()
            expected = buckets_of([to_domain(data.column("key"))], 4)
            assert (expected == entry.bucket).all(), "every row sits in its hash bucket"


def test_replicated_table_is_whole_on_every_node(tmp_path: Path) -> None:
    source = sample(1000)
    stores = [Store(tmp_path / "n0", "node-0"), Store(tmp_path / "n1", "node-1")]
    load_table(stores, schema_of(source, "replicated", 1), source)
    for store in stores:
        assert by_key(store.table("sales").to_arrow()).equals(source)


def test_blocks_hold_rc_rows_sorted_by_the_sort_key(tmp_path: Path) -> None:
    source = sample()
    schema = schema_of(source, buckets=2)
    budget = 30_000
    store = Store(tmp_path)
    [manifest] = load_table([store], schema, source, LoadOptions(block_budget=budget))
    rs = record_size(source, schema)
    assert manifest.sizing.record_bytes == rs
    assert manifest.sizing.block_rows == budget // rs
    assert len(manifest.blocks) > 2
    for entry, block in store.table("sales").iter_blocks():
        assert entry.rows <= manifest.sizing.block_rows
        data = block.decode()
        days = data.column("day").cast(pa.int32()).to_numpy()
        assert (np.diff(days) >= 0).all()


def blocks_of(store: Store, table: str) -> list[tuple[int, str]]:
    """Every block of `table` on `store` as (bucket, its rows), in a fixed order."""
    return sorted((entry.bucket, repr(block.decode().to_pylist())) for entry, block in store.table(table).iter_blocks())


@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_a_streamed_load_writes_the_blocks_of_a_whole_table_load(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hash-placed file source streams (spilled by bucket, a batch at a time) into the very
    blocks that loading the table whole writes, sized by the same longest record."""
    monkeypatch.setattr("storage.loader.SPILL_BATCH_ROWS", 700)  # several batches per file
    monkeypatch.setattr("storage.sources.CSV_BLOCK_BYTES", 20_000)
    source = sample(3000).drop_columns(["amount"] if kind == "csv" else [])  # CSV: no decimal inference
    paths = []
    for i, part in enumerate((source.slice(0, 1700), source.slice(1700))):
        path = tmp_path / f"part-{i}.{kind}"
        (pq.write_table if kind == "parquet" else pacsv.write_csv)(part, path)
        paths.append(str(path))
    files = Source(kind, tuple(paths))
    whole = files.read()
    schema = schema_of(whole)
    options = LoadOptions(block_budget=8_000)
    streamed = [Store(tmp_path / f"s{i}", f"node-{i}") for i in range(2)]
    at_once = [Store(tmp_path / f"w{i}", f"node-{i}") for i in range(2)]
    written: list[int] = []
    manifests = load_source(streamed, schema, files, options, written.append)
    expected = load_table(at_once, schema, whole, options)
    assert sum(written) == source.num_rows
    assert [m.sizing for m in manifests] == [m.sizing for m in expected]
    for mine, theirs in zip(streamed, at_once, strict=True):
        assert blocks_of(mine, "sales") == blocks_of(theirs, "sales")


def test_a_streamed_load_with_a_bad_row_in_a_later_batch_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("storage.loader.SPILL_BATCH_ROWS", 100)
    source = sample(1000).set_column(5, "note", pa.array(["n"] * 900 + [None] * 100))  # nulls in the 10th batch
    path = tmp_path / "sales.parquet"
    pq.write_table(source, path)
    schema = schema_of(source)
    schema = TableSchema.from_arrow(
        "sales", source.schema.set(5, pa.field("note", pa.string(), nullable=False)), schema.sort_key, schema.placement
    )
    store = Store(tmp_path / "n0")
    with pytest.raises(SchemaError, match="column note is NOT NULL"):
        load_source([store], schema, Source("parquet", (str(path),)))
    assert not store.exists("sales")
    assert not list((tmp_path / "n0").rglob("*.arrow")), "the spilled buckets are removed"


def test_record_size_counts_the_longest_string(tmp_path: Path) -> None:
    table = pa.table({"k": pa.array([1, 2], pa.int64()), "s": ["abc", "abcdefghij"]})
    schema = TableSchema.from_arrow("t", table.schema)
    assert record_size(table, schema) == 8 + (10 + 4)


def test_replace_and_append_make_new_versions_and_collect_old_files(tmp_path: Path) -> None:
    store = Store(tmp_path)
    first, second = sample(2000, seed=1), sample(2000, seed=2)
    schema = schema_of(first)
    load_table([store], schema, first)
    old_files = {b.file for b in store.table("sales").blocks}
    load_table([store], schema, second)
    table = store.table("sales")
    assert table.manifest.version == 2
    assert by_key(table.to_arrow()).equals(second)
    assert by_key(store.table("sales", version=1).to_arrow()).equals(first), "the replaced version stays readable"
    assert store.versions("sales") == [1, 2]
    assert store.release("sales", 1) and not store.release("sales", 1) and not store.release("sales", 2)
    assert store.versions("sales") == [2]
    assert not any((tmp_path / "sales" / f).exists() for f in old_files), "released blocks are removed"
    with pytest.raises(VersionGoneError, match="version 1"):
        store.table("sales", version=1)
    load_table([store], schema, first, LoadOptions(mode="append"))
    table = store.table("sales")
    assert table.manifest.version == 3 and table.rows == 4000
    assert (
        table.to_arrow()
        .sort_by([("key", "ascending"), ("amount", "ascending")])
        .equals(pa.concat_tables([first, second]).sort_by([("key", "ascending"), ("amount", "ascending")]))
    )


def test_append_with_other_columns_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path)
    source = sample(500)
    load_table([store], schema_of(source), source)
    other = source.drop_columns(["note"])
    with pytest.raises(SchemaError, match="cannot append"):
        load_table([store], schema_of(other), other, LoadOptions(mode="append"))
    assert store.table("sales").manifest.version == 1
    assert sorted(p.name for p in (tmp_path / "sales").iterdir() if p.suffix in (".zst", ".tmp")) == sorted(
        b.file for b in store.table("sales").blocks
    )


def test_not_null_violation_names_the_column_and_writes_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path)
    source = sample(100)
    schema = TableSchema.from_arrow("sales", source.schema.set(3, pa.field("city", pa.string(), nullable=False)))
    with pytest.raises(SchemaError, match="column city is NOT NULL"):
        load_table([store], schema, source)
    assert not store.exists("sales")


def test_empty_table_round_trips(tmp_path: Path) -> None:
    store = Store(tmp_path)
    source = sample(0)
    load_table([store], schema_of(source), source)
    table = store.table("sales")
    assert table.rows == 0 and table.to_arrow().equals(source)


def _flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("compression", ["zstd", "none"])
def test_corrupt_truncated_and_missing_blocks_are_reported_by_name(tmp_path: Path, compression: str) -> None:
    store = Store(tmp_path)
    source = sample(3000)
    load_table([store], schema_of(source), source, LoadOptions(compression=compression))
    table = store.table("sales")
    flipped, truncated, missing = (tmp_path / "sales" / b.file for b in table.blocks[:3])
    _flip_byte(flipped, flipped.stat().st_size // 2)
    truncated.write_bytes(truncated.read_bytes()[:-10])
    missing.unlink()
    with pytest.raises(CorruptBlockError, match=flipped.name + ".*checksum"):
        table.read_block(table.blocks[0])
    with pytest.raises(CorruptBlockError, match=truncated.name + ".*truncated"):
        table.read_block(table.blocks[1])
    with pytest.raises(CorruptBlockError, match=missing.name + ".*missing"):
        table.read_block(table.blocks[2])
    with pytest.raises(CorruptBlockError, match="table sales"):
        table.to_arrow()
    problems = table.verify()
    assert len(problems) == 3
    assert all(any(p.name in message for message in problems) for p in (flipped, truncated, missing))


_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import pyarrow.parquet as pq
    from storage import Store
    from storage.loader import LoadOptions, load_table
    from storage.tpch import schema_for

    store_dir, source, marker = sys.argv[1:]
    table = pq.read_table(source)

    def stall_after_first_block(rows):
        Path(marker).touch()
        time.sleep(120)

    load_table([Store(store_dir)], schema_for("lineitem", table.schema), table,
               LoadOptions(block_budget=200_000, workers=1), stall_after_first_block)
    """
)


def test_a_load_killed_midway_leaves_the_previous_version_readable(tmp_path: Path, tpch_files: dict[str, Path]) -> None:
    store = Store(tmp_path / "store")
    source = read_parquet([tpch_files["lineitem"]])
    first = source.slice(0, 20_000)
    load_table([store], schema_for("lineitem", source.schema), first)
    before = store.table("lineitem").to_arrow()
    marker = tmp_path / "first-block-written"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(store.root), str(tpch_files["lineitem"]), str(marker)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )

    def stalled() -> bool:
        assert child.poll() is None, "the loading process ended before writing a block"
        return marker.exists()

    eventually(stalled, 120, "the loading process writing its first block")
    child.send_signal(signal.SIGKILL)
    child.wait()

    table_dir = store.root / "lineitem"
    referenced = {b.file for b in store.table("lineitem").blocks}
    orphans = [p for p in table_dir.iterdir() if p.name.endswith((".zst", ".tmp")) and p.name not in referenced]
    assert orphans, "the killed load had written block files"
    table = store.table("lineitem")
    assert table.manifest.version == 1
    assert table.to_arrow().equals(before)
    assert table.verify() == []

    old = time.time() - ORPHAN_AGE_S - 60
    for path in orphans:
        os.utime(path, (old, old))
    load_table([store], schema_for("lineitem", source.schema), first)
    assert not any(p.exists() for p in orphans), "the next load removes a dead load's files"


def test_decoded_strings_keep_non_ascii_text(tmp_path: Path) -> None:
    store = Store(tmp_path)
    source = sample(500)
    load_table([store], schema_of(source), source)
    cities = set(pc.unique(store.table("sales").to_arrow().column("city")).to_pylist())
    assert cities == {"Москва", "Zürich", "東京", "Lima", None}


def test_an_aborted_load_keeps_no_block_even_one_uploaded_after_the_abort(tmp_path: Path) -> None:
    target = DirectoryTarget(Store(tmp_path / "n0", node="node-0"))
    load = "0123456789ab"
    target.put("t", load, f"{load}-0000-part1-000000.arrow", b"early")
    target.abort("t", load)  # one task failed: Spark aborts while another task still uploads
    with pytest.raises(StorageError, match="aborted"):
        target.put("t", load, f"{load}-0001-part2-000000.arrow", b"late")
    assert not list((tmp_path / "n0" / "t").glob(f"{load}-*"))
    assert target.store.tables() == []


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 1 MiB file system of its own (tmpfs), for a disk that fills up; skipped where mounting is
    not allowed."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a small file system here (needs root)")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.parametrize("streamed", [False, True])
def test_a_full_disk_fails_the_load_naming_the_table_and_keeps_the_served_version(
    small_disk: Path, tmp_path: Path, streamed: bool
) -> None:
    store = Store(small_disk, node="node-0")
    first = sample(500)
    load_table([store], schema_of(first), first)
    files_before = sorted(p.name for p in (small_disk / "sales").iterdir())
    rng = np.random.default_rng(1)
    noise = pa.array([rng.bytes(64).hex() for _ in range(40_000)], pa.string())  # incompressible: 5 MB
    big = pa.table({"key": pa.array(range(40_000), pa.int64()), "noise": noise})
    wide = TableSchema.from_arrow("sales", big.schema, (), Placement.parse("hash(key)", 4))
    with pytest.raises(DiskFullError, match="table sales on node node-0: no space left"):
        if streamed:  # its rows spilled by bucket first
            pq.write_table(big, tmp_path / "big.parquet")
            load_source([store], wide, Source("parquet", (str(tmp_path / "big.parquet"),)))
        else:
            load_table([store], wide, big)
    assert by_key(store.table("sales").to_arrow()).equals(by_key(first)), "the served version is intact"
    assert store.versions("sales") == [1]
    left = sorted(p.name for p in (small_disk / "sales").iterdir() if p.suffix != ".aborted")  # the abort's mark
    assert left == files_before, "no part of the load is left"


@settings(max_examples=60, deadline=None)
@given(
    block_rows=st.integers(1, 40),
    batches=st.lists(st.integers(0, 90), max_size=30),
)
def test_a_streamed_bucket_holds_under_two_blocks_and_hands_on_whole_ones(block_rows: int, batches: list[int]) -> None:
    stream = BlockStream(block_rows)
    given_on, start = [], 0
    for size in batches:
        rows = stream.add(pa.record_batch({"n": pa.array(range(start, start + size), pa.int64())}))
        start += size
        if rows is not None:
            assert rows.num_rows % block_rows == 0, "only whole blocks before the end"
            given_on.append(rows)
        assert stream.held < 2 * block_rows, "under two blocks' rows held between batches"
    rest = stream.end()
    assert stream.held == 0 and stream.end() is None
    if rest is not None:
        assert 0 < rest.num_rows < 2 * block_rows
        given_on.append(rest)
    numbers = [n for t in given_on for n in t.column("n").to_pylist()]
    assert numbers == list(range(start)), "every row once, in order"


def test_a_load_that_fails_on_one_node_is_undone_on_the_nodes_that_committed(tmp_path: Path) -> None:
    """Node 1 refuses the commit (its table has other columns); node 0 had committed already and
    goes back to its previous version: no node is left a version ahead, no file of the load stays."""
    first, other = sample(300), sample(200).drop_columns(["note"])
    stores = [Store(tmp_path / "n0", "node-0"), Store(tmp_path / "n1", "node-1")]
    load_table(stores[:1], schema_of(first, "replicated"), first)
    load_table(stores[1:], schema_of(other, "replicated"), other)
    before = [sorted(p.name for p in s.table_dir("sales").iterdir() if p.suffix != ".aborted") for s in stores]
    with pytest.raises(SchemaError, match="cannot append"):
        load_table(stores, schema_of(first, "replicated"), first, LoadOptions(mode="append"))
    assert [s.versions("sales") for s in stores] == [[1], [1]]
    assert by_key(stores[0].table("sales").to_arrow()).equals(by_key(first)), "node 0 serves its first version"
    after = [sorted(p.name for p in s.table_dir("sales").iterdir() if p.suffix != ".aborted") for s in stores]
    assert after == before
    assert not stores[0].revert("sales", "0123456789ab"), "another load's version is never undone"
