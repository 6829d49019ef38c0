"""The configuration's reference: `cxg config defaults` prints every option at its default from the
sections' classes, docs/configuration.md is exactly that, and what it prints (its commented
examples too) reads back as it says."""

from __future__ import annotations

from pathlib import Path

import pytest

from cxg import main
from regions import Config, defaults_toml, load_config

pytestmark = pytest.mark.check  # the fast lane (`make check`): no Spark, no server

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def _uncommented(text: str, first: str) -> str:
    """The commented lines of `text` from the one that reads `# {first}` on, without their `#`,
    until the first line that is not a comment."""
    lines = text.splitlines()
    start = lines.index(f"# {first}")
    example = []
    for line in lines[start:]:
        if not line.startswith("#"):
            break
        example.append(line.removeprefix("#").removeprefix(" "))
    return "\n".join(example) + "\n"


def test_the_documentation_holds_exactly_what_cxg_config_defaults_prints(capsys: pytest.CaptureFixture) -> None:
    assert main(["config", "defaults"]) == 0
    printed = capsys.readouterr().out
    assert printed == defaults_toml()
    assert f"```toml\n{printed}```\n" in DOC.read_text(), "docs/configuration.md: paste `cxg config defaults` again"


def test_every_section_and_option_is_printed_with_a_comment() -> None:
    text = defaults_toml()
    for section in ("storage", "spark", "gateway", "region", "simulation", "balancing"):
        assert f"\n[{section}]\n" in text
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line and not line.startswith(("#", "[")):
            assert lines[number - 1].startswith("# "), f"{line}: no comment above it"
    for option in ("shuffle_partitions", "broadcast_threshold", "max_wait", "exchange_dir"):
        assert f"\n# {option} = " in text or f"\n{option} = " in text


def test_the_printed_defaults_read_back_as_the_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./cxg.toml
    path = tmp_path / "cxg.toml"
    path.write_text(defaults_toml())
    assert load_config(path) == Config() == load_config(None, [])


def test_the_commented_examples_read_as_they_say(tmp_path: Path) -> None:
    text = defaults_toml()
    path = tmp_path / "regions.toml"
    path.write_text(text + _uncommented(text, "[regions.east]"))
    east, west = load_config(path), load_config(path, region="west")
    assert (east.name, east.gateway.port, west.name, west.gateway.port) == ("east", 8080, "west", 8081)
    assert (east.gateway.region, west.gateway.region) == (1, 2)
    assert east.regions["east"].default and east.regions["west"].copies_of == ("east",)
    assert east.regions["east"].tables(east.regions) == {"lineitem", "orders", "customer"}
    assert east.regions["west"].tables(east.regions) == {"lineitem", "orders", "customer"}
    assert east.regions["west"].url == "http://10.0.0.2:8081"

    path.write_text(text.replace("\n[region]\n", "\n" + _uncommented(text, "[[gateway.tokens]]") + "\n[region]\n"))
    (token,) = load_config(path).gateway.tokens
    assert (token.name, token.token, token.max_concurrent, token.tables) == (
        "reports",
        "change-me",
        8,
        ["orders", "lineitem"],
    )

    unset = load_config(None, ["spark.shuffle_partitions=8", 'spark.exchange_dir="/shared/cxg-exchange"']).spark
    assert f"# shuffle_partitions = {unset.shuffle_partitions}" in text
    assert f'# exchange_dir = "{unset.exchange_dir}"' in text
