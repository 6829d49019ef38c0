"""The `cxg load` and `cxg storage` commands, run as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from cxg import main
from gateway.config import ConfigError, load_config, parse_size
from storage import Store

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


def test_load_tpch_subset_into_two_nodes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    nodes = [str(tmp_path / "n0"), str(tmp_path / "n1")]
    data_options = [option for n in nodes for option in ("--data", n)]
    code, out, err = run(capsys, "load", "tpch", "--sf", "0.01", "--tables", "nation,orders", *data_options)
    assert code == 0, err
    assert "loaded nation: 25 rows" in out and "loaded orders: 15,000 rows" in out
    stores = [Store(n) for n in nodes]
    assert all(s.table("nation").rows == 25 for s in stores), "replicated on both nodes"
    assert sum(s.table("orders").rows for s in stores) == 15_000, "hash-partitioned over both"


@pytest.mark.parametrize(
    ("argv", "code_name", "fragment"),
    [
        (["load", "csv", "t", "/nonexistent/x.csv"], "storage_error", "/nonexistent/x.csv"),
        (["load", "parquet", "t", "/nonexistent/x.parquet"], "storage_error", "/nonexistent/x.parquet"),
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


def test_bad_placement_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = tmp_path / "s.csv"
    source.write_text(CSV)
    code, _, err = run(capsys, "load", "csv", "s", str(source), "--placement", "range(id)", "--data", str(tmp_path))
    assert code == 2 and "[invalid_schema]" in err and "range(id)" in err


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


def test_parse_size() -> None:
    assert parse_size("64MiB") == 64 << 20
    assert parse_size("1.5GB") == 1_500_000_000
    assert parse_size("512k") == 512_000
    assert parse_size(100) == 100
    with pytest.raises(ConfigError, match="not a size"):
        parse_size("lots")


def test_spark_exchange_is_checked_and_reaches_the_settings() -> None:
    settings = load_config(None, ["spark.exchange=source", "spark.exchange_dir=/shared/x"]).spark.settings()
    assert settings.exchange_mode() == "source" and settings.exchange_dir == "/shared/x"
    assert load_config(None, ['spark.exchange_dir=""']).spark.settings().exchange_dir is None  # the temp dir
    with pytest.raises(ConfigError, match="exchange must be auto, files or source"):
        load_config(None, ["spark.exchange=carrier-pigeon"])
