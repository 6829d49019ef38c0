"""The `cxg` command line run as a user runs it: `cxg load`, `cxg storage`, the configuration
it reads, where its commands find the data, and how `cxg query` reports errors."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from cxg import build_parser, main
from cxg.data_dirs import stores_of
from cxg.load import ingest_engine
from cxg.serve import served_data
from gateway import free_port
from regions import LocalRegion, load_config
from storage import ConfigError, Store, parse_size

CSV = "id,city,amount,day\n1,Zürich,10.50,2024-01-02\n2,,7.25,2024-01-02\n3,東京,,2024-01-03\n"


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_load_csv_then_stats_tables_verify_and_head(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = tmp_path / "sales.csv"
    source.write_text(CSV)
    data = str(tmp_path / "data")
    code, out, _ = run(
        capsys, "load", "csv", "sales", str(source), "--data", data, "--sort-key", "day", "--engine", "local"
    )
    assert code == 0 and "loaded sales: 3 rows" in out
    table = Store(data).table("sales").to_arrow().sort_by("id")
    assert table.column("city").to_pylist() == ["Zürich", None, "東京"]
    assert table.column("amount").to_pylist() == [10.5, 7.25, None]

    code, out, _ = run(capsys, "storage", "stats", "sales", "--data", data, "--candidates")
    assert code == 0
    for expected in ("sales: 3 rows in 1 blocks", "chain", "ratio", "city", "rle", "on disk", "candidate sizes"):
        assert expected in out
    code, out, _ = run(capsys, "storage", "tables", "--data", data)
    assert code == 0 and "sales" in out and "replicated" in out
    code, out, _ = run(capsys, "storage", "verify", "--data", data)
    assert code == 0 and "1 blocks ok" in out
    code, out, _ = run(capsys, "storage", "head", "sales", "-n", "2", "--data", data)
    assert code == 0 and "amount" in out


def test_csv_with_schema_file_and_no_header(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = tmp_path / "t.csv"
    source.write_text("1|a|2024-05-01\n2||2024-05-02\n")
    schema = tmp_path / "t.json"
    columns = [
        {"name": "k", "type": "int32", "nullable": False},
        {"name": "s", "type": "string_view"},
        {"name": "d", "type": "date"},
    ]
    schema.write_text(json.dumps({"columns": columns, "placement": "hash(k)"}))
    data = str(tmp_path / "data")
    argv = ["load", "csv", "t", str(source), "--schema", str(schema), "--no-header", "--delimiter", "|"]
    code, _, err = run(capsys, *argv, "--data", data, "--buckets", "2")
    assert code == 0, err
    table = Store(data).table("t")
    assert table.schema.placement.buckets == 2
    decoded = table.to_arrow()
    assert decoded.schema.field("s").type == pa.string_view()
    assert decoded.schema.field("k").nullable is False
    assert sorted(decoded.column("k").to_pylist()) == [1, 2]


def test_load_parquet_with_layout_options(
    tmp_path: Path, capsys: pytest.CaptureFixture, tpch_files: dict[str, Path]
) -> None:
    data = str(tmp_path / "data")
    argv = ["load", "parquet", "ord", str(tpch_files["orders"]), "--sort-key", "o_orderdate"]
    code, _, err = run(capsys, *argv, "--placement", "hash(o_orderkey)", "--buckets", "4", "--data", data)
    assert code == 0, err
    table = Store(data).table("ord")
    assert str(table.schema.placement) == "hash(o_orderkey) x4"
    assert table.rows == 15_000


@pytest.mark.parametrize("share", [None, "0.00001"])
def test_load_tpch_subset_into_two_nodes_placed_by_size(tmp_path: Path, capsys: pytest.CaptureFixture, share) -> None:
    """Small tables are replicated (a node answers the queries over them whole); a table larger than
    storage.replicate_below of a node's budget is hash-placed on its key; orders (with lineitem) is
    hash-placed on the order key whatever its size, so that their joins run on the nodes."""
    nodes = [str(tmp_path / "n0"), str(tmp_path / "n1")]
    data_options = [option for n in nodes for option in ("--data", n)]
    setting = ["--set", f"storage.replicate_below={share}"] if share else []
    tables = ["--tables", "nation,customer,orders"]
    code, out, err = run(capsys, *setting, "load", "tpch", "--sf", "0.01", *tables, *data_options)
    assert code == 0, err
    assert "loaded nation: 25 rows" in out and "loaded orders: 15,000 rows" in out
    stores = [Store(n) for n in nodes]
    assert all(s.table("nation").rows == 25 for s in stores), "replicated on both nodes"
    assert "nation: 0.0 MiB, at most" in out and "replicated on every node" in out
    assert "orders: hash(o_orderkey) x16, co-partitioned on the order key" in out
    assert sum(s.table("orders").rows for s in stores) == 15_000, "hash-partitioned over both, however small"
    if share:
        assert sum(s.table("customer").rows for s in stores) == 1_500, "hash-partitioned over both"
        assert "customer:" in out and "hash(c_custkey) x16" in out
    else:
        assert all(s.table("customer").rows == 1_500 for s in stores), "small: replicated on both"


def test_load_tables_of_directories_in_one_spark_application(
    tmp_path: Path, capsys: pytest.CaptureFixture, tpch_files: dict[str, Path]
) -> None:
    """Each Parquet file, or folder of Parquet files, in the directories is a table named by it,
    placed by its size; one Spark application loads them all."""
    first, second = tmp_path / "a", tmp_path / "b"
    (second / "orders").mkdir(parents=True)
    first.mkdir()
    shutil.copy(tpch_files["nation"], first / "nation.parquet")
    shutil.copy(tpch_files["region"], first / "region.parquet")
    (first / "notes.txt").write_text("not a table")
    shutil.copy(tpch_files["orders"], second / "orders" / "part-0.parquet")
    nodes = [str(tmp_path / "n0"), str(tmp_path / "n1")]
    data_options = [option for n in nodes for option in ("--data", n)]
    setting = ["--set", "storage.replicate_below=0.00001"]  # orders is larger: hash-placed
    load = ["load", "tables", str(first), str(second), "--engine", "spark"]
    code, out, err = run(capsys, *setting, *load, *data_options)
    assert code == 0, err
    assert out.count("Spark application ") == 1 and "loads 3 table(s)" in out
    stores = [Store(n) for n in nodes]
    assert sorted(stores[0].tables()) == ["nation", "orders", "region"]
    assert all(s.table("nation").rows == 25 and s.table("region").rows == 5 for s in stores)
    assert sum(s.table("orders").rows for s in stores) == 15_000 and "hash(o_orderkey) x16" in out
    (second / "nation.parquet").write_bytes((first / "nation.parquet").read_bytes())
    code, _, err = run(capsys, "load", "tables", str(first), str(second), *data_options)
    assert code == 2 and "[storage_error]" in err and "two sources for table nation" in err
    code, _, err = run(capsys, "load", "tables", str(tmp_path / "n0" / "nation"), *data_options)
    assert code == 2 and "no Parquet file or folder of Parquet files in" in err


@pytest.mark.check
@pytest.mark.parametrize(
    ("argv", "code_name", "fragment"),
    [
        (["load", "csv", "t", "/nonexistent/x.csv"], "storage_error", "/nonexistent/x.csv"),
        (["load", "parquet", "t", "/nonexistent/x.parquet"], "storage_error", "/nonexistent/x.parquet"),
        (["load", "tables", "/nonexistent"], "storage_error", "/nonexistent is not a directory"),
        (["storage", "stats", "missing"], "table_not_found", "missing"),
        (["load", "tpch", "--tables", "lineitems"], "storage_error", "lineitems"),
        (["load", "tpch", "--sf", "-1"], "storage_error", "scale factor"),
    ],
)
def test_errors_exit_2_with_a_stable_code(
    tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], code_name: str, fragment: str
) -> None:
    code, _, err = run(capsys, *argv, "--data", str(tmp_path))
    assert code == 2
    assert f"[{code_name}]" in err and fragment in err


@pytest.mark.check
def test_bad_placement_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = tmp_path / "s.csv"
    source.write_text(CSV)
    code, _, err = run(capsys, "load", "csv", "s", str(source), "--placement", "range(id)", "--data", str(tmp_path))
    assert code == 2 and "[invalid_schema]" in err and "range(id)" in err


@pytest.mark.check
def test_config_file_sets_defaults(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = tmp_path / "s.csv"
    source.write_text(CSV)
    config = tmp_path / "cxg.toml"
    config.write_text(f'[storage]\ndata = ["{tmp_path / "cfg-data"}"]\ncompression = "none"\nblock_budget = "1MiB"\n')
    code, _, err = run(capsys, "--config", str(config), "load", "csv", "s", str(source), "--engine", "local")
    assert code == 0, err
    table = Store(tmp_path / "cfg-data").table("s")
    assert table.blocks[0].compression == "none"
    assert table.manifest.sizing.budget_bytes == 1 << 20

    config.write_text("[storage]\nblok_budget = 1\n")
    code, _, err = run(capsys, "--config", str(config), "storage", "tables")
    assert code == 2 and "blok_budget" in err


@pytest.mark.check
def test_parse_size() -> None:
    assert parse_size("64MiB") == 64 << 20
    assert parse_size("1.5GB") == 1_500_000_000
    assert parse_size("512k") == 512_000
    assert parse_size(100) == 100
    with pytest.raises(ConfigError, match="not a size"):
        parse_size("lots")


@pytest.mark.check
def test_the_ingest_engine_is_local_for_this_hosts_directories_and_spark_live_unless_set() -> None:
    config = load_config(None, [])
    assert config.storage.ingest == "auto"
    assert ingest_engine(config) == "local" and ingest_engine(config, live=True) == "spark"
    assert ingest_engine(config, "spark") == "spark"
    assert ingest_engine(load_config(None, ['storage.ingest="spark"'])) == "spark"
    with pytest.raises(ConfigError, match=r"storage\.ingest must be one of auto, local, spark, not 'hadoop'"):
        load_config(None, ['storage.ingest="hadoop"'])


@pytest.mark.check
def test_device_memory_is_auto_or_a_size() -> None:
    assert load_config(None, ["storage.device_memory=6GiB"]).storage.device_memory == "6GiB"
    with pytest.raises(ConfigError, match="device_memory must be auto or a size, not 'most'"):
        load_config(None, ["storage.device_memory=most"])


@pytest.mark.check
def test_spark_exchange_is_checked_and_reaches_the_settings() -> None:
    settings = load_config(None, ["spark.exchange=source", "spark.exchange_dir=/shared/x"]).spark
    assert settings.exchange_mode() == "source" and settings.exchange_dir == "/shared/x"
    assert load_config(None, ['spark.exchange_dir=""']).spark.exchange_dir is None  # the temp dir
    with pytest.raises(ConfigError, match="exchange must be auto, files or source"):
        load_config(None, ["spark.exchange=carrier-pigeon"])


@pytest.mark.check
def test_a_single_directory_for_storage_data_is_a_list_of_one(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = tmp_path / "s.csv"
    source.write_text(CSV)
    one = tmp_path / "data" / "node-0"
    assert load_config(None, [f"storage.data={one}"]).storage.data == [str(one)]
    code, out, err = run(capsys, "--set", f"storage.data={one}", "load", "csv", "s", str(source), "--engine", "local")
    assert code == 0, err
    assert "loaded s: 3 rows" in out and f"into {one}" in out
    assert Store(one).table("s").rows == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "s.csv"], "no directory per character"
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["node-0"]


@pytest.mark.check
@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("gateway.port=abc", "gateway.port must be an integer, not 'abc'"),
        ("gateway.port=true", "gateway.port must be an integer, not True"),
        ("spark.adaptive=1", "spark.adaptive must be a boolean (true or false), not 1"),
        ("storage.data=5", "storage.data must be a list of strings (or a single one), not 5"),
        ("storage.data=[1]", "storage.data[0] must be a string, not 1"),
        ("spark.conf={a=1}", "spark.conf.a must be a string, not 1"),
        ('gateway.tokens=[{name="a"}]', "[gateway.tokens[0]] needs name and token: token missing"),
        ('gateway.tokens=[{name="a", token="t", max_concurrent="x"}]', "max_concurrent must be an integer"),
        ('simulation.queries={q1={seconds="slow"}}', "simulation.queries.q1.seconds must be a number, not 'slow'"),
        ("gateway.bogus=1", "unknown option(s) in [gateway]: bogus"),
        ('spark.log_level="loud"', "spark.log_level must be one of auto, all, debug"),
        ("spark.executor_wait=0", "spark.executor_wait must be a positive number of seconds"),
        ('balancing.method="centralized"', "balances between regions, and the configuration describes none"),
    ],
)
def test_configuration_values_are_checked_by_their_type(
    capsys: pytest.CaptureFixture, assignment: str, message: str
) -> None:
    code, _, err = run(capsys, "--set", assignment, "storage", "tables")
    assert code == 2
    assert err.startswith("cxg: error [invalid_config]: ") and message in err


@pytest.mark.check
def test_configuration_values_of_the_right_type_are_kept() -> None:
    config = load_config(None, ["simulation.time_scale=1", "spark.shuffle_partitions=3", 'storage.data=["a", "b"]'])
    assert config.simulation.time_scale == 1.0 and isinstance(config.simulation.time_scale, float)
    assert config.spark.shuffle_partitions == 3 and config.storage.data == ["a", "b"]


def test_load_storage_up_and_demo_agree_on_the_data_location(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "s.csv"
    source.write_text(CSV)
    argv = ["load", "csv", "s", str(source), "--placement", "hash(id)", "--buckets", "2", "--engine", "local"]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert "into data/node-0, data/node-1" in out
    assert sum(Store(tmp_path / "data" / n).table("s").rows for n in ("node-0", "node-1")) == 3

    code, out, _ = run(capsys, "storage", "tables")
    assert code == 0 and "node-0" in out and "node-1" in out and "hash(id) x2" in out

    config = load_config(None)
    nodes = [role.args for role in LocalRegion(config).layout() if role.name.startswith("node-")]
    assert [args[args.index("--data") + 1] for args in nodes] == ["data/node-0", "data/node-1"]
    demo = build_parser().parse_args(["demo"])
    assert [str(s.root) for s in stores_of(demo, config)] == ["data/node-0", "data/node-1"]
    served = served_data(config)
    assert served[0].startswith("node-0 serves data/node-0: s (") and "rows)" in served[0]
    assert served[1].startswith("node-1 serves data/node-1: s (")


@pytest.mark.check
def test_up_says_when_a_directory_holds_no_table(tmp_path: Path) -> None:
    config = load_config(None, [f"storage.data={tmp_path / 'empty'}"])
    assert served_data(config) == [f"node-0 serves {tmp_path / 'empty'}: no tables (load some with `cxg load tpch`)"]


@pytest.mark.check
def test_query_errors_exit_2_with_the_code(capsys: pytest.CaptureFixture) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = run(capsys, "query", "--url", url, "select 1")
    assert code == 2 and out == ""
    assert err == f"cxg: error [unreachable]: cannot reach the gateway at {url}: [Errno 111] Connection refused\n"
    code, _, err = run(capsys, "status", "--url", url)
    assert code == 2 and err.startswith("cxg: error [unreachable]: cannot reach the gateway")


def _bars(out: str, unit: str) -> list[tuple[int, int]]:
    return [(int(done), int(total)) for done, total in re.findall(rf"(\d+)/(\d+)\s+{unit}", out)]


def test_load_progress_bars_end_full(tmp_path: Path, capsys: pytest.CaptureFixture, spark) -> None:
    """Into this host's directories a load runs in process by default (orders streamed by bucket),
    with a bar of rows; `--engine spark` runs the ingest pipeline, with a bar of Spark tasks."""
    data = ["--data", str(tmp_path / "n0"), "--data", str(tmp_path / "n1")]
    tables = ["--tables", "nation,orders"]
    code, out, err = run(capsys, "load", "tpch", "--sf", "0.01", *tables, *data, "--engine", "spark")
    assert code == 0, err
    bars = _bars(out, "Spark tasks")
    assert len(bars) == 2 and all(done == total > 0 for done, total in bars), out
    code, out, err = run(capsys, "load", "tpch", "--sf", "0.01", *tables, *data)
    assert code == 0, err
    assert "Spark application" not in out and _bars(out, "rows") == [(25, 25), (15_000, 15_000)], out
    assert "loaded orders: 15,000 rows" in out and sum(Store(d).table("orders").rows for d in data[1::2]) == 15_000


@pytest.mark.slow
def test_a_spark_load_prints_no_spark_warnings(tmp_path: Path) -> None:
    """In a process of its own, so that Spark starts there: its WARN lines stay out."""
    settings = ["--set", 'spark.master="local[1]"', "--set", 'spark.driver_memory="1g"']
    load = ["load", "tpch", "--sf", "0.01", "--tables", "region", "--data", str(tmp_path), "--engine", "spark"]
    done = subprocess.run(
        [sys.executable, "-m", "cxg", *settings, *load],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert _bars(done.stdout, "Spark tasks") and all(d == t for d, t in _bars(done.stdout, "Spark tasks"))
    assert " WARN " not in done.stderr and "log level" not in done.stderr, done.stderr


def test_simulate_regions_prints_every_method_beside_the_published(tmp_path: Path, capsys) -> None:
    code, out, err = run(capsys, "simulate", "regions", "--seeds", "1", "--json", str(tmp_path / "r.json"))
    assert code == 0, err
    assert all(name in out for name in ("none", "centralized", "decentralized", "idle-pull", "Table 5.7"))
    figures = json.loads((tmp_path / "r.json").read_text())
    assert list(figures["methods"]) == ["none", "centralized", "decentralized", "idle-pull"]
    assert figures["methods"]["decentralized"]["published"] == [16812, 9314, 8845]
    assert figures["methods"]["idle-pull"]["total"] > figures["methods"]["none"]["total"]
