"""The documentation holds what the code does: the README stays short, every relative link lands on
a file and heading that exist, the gateway's endpoint tables (docs/http-api.md) list exactly the
routes it serves and every path of its OpenAPI document, and the node's (docs/scan-protocol.md)
exactly the node's routes, with every field of the scan request's JSON Schema and an example that
the schema and the node's reader accept."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from aiohttp import web

from gateway.openapi import document
from gpu_kernels import get_backend
from regions import gateway_app, load_config, region_gateway
from storage import Node, ScanRequest, Store
from storage.scan_protocol import REQUEST_SCHEMA

pytestmark = pytest.mark.check  # the fast lane (`make check`): no Spark, no server

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "docker").glob("*.md"))]
HTTP_API = ROOT / "docs" / "http-api.md"
SCAN_PROTOCOL = ROOT / "docs" / "scan-protocol.md"
ROUTE = re.compile(r"^\| `(GET|POST|PUT|DELETE) (/\S*)` \|", re.MULTILINE)


def _outside_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def _prose(text: str) -> str:
    """`text` without its code, blocks and inline, where brackets are not links."""
    return re.sub(r"`[^`\n]*`", "", _outside_code_blocks(text))


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of `page`: lower case, punctuation dropped, spaces as
    hyphens, a repeated one numbered."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#+ (.+)$", _outside_code_blocks(page.read_text()), flags=re.MULTILINE):
        anchor = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        numbered, n = anchor, 0
        while numbered in anchors:
            n += 1
            numbered = f"{anchor}-{n}"
        anchors.add(numbered)
    return anchors


def _section(page: Path, heading: str) -> str:
    text = page.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _routes(app: web.Application) -> list[tuple[str, str]]:
    return sorted((route.method, route.resource.canonical) for route in app.router.routes() if route.method != "HEAD")


def _listed(text: str) -> list[tuple[str, str]]:
    return sorted(ROUTE.findall(text))


def test_the_readme_is_read_in_five_minutes() -> None:
    assert len(README.read_text().splitlines()) <= 250


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_lands_on_a_file_and_heading_that_exist(page: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _prose(page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and (linked.suffix != ".md" or anchor not in _anchors(linked))):
            broken.append(target)
    assert not broken


def test_the_gateways_endpoint_tables_list_every_route_it_serves_and_every_path_of_its_openapi(
    tmp_path: Path,
) -> None:
    """The public table and the table of the routes between the gateway's own parts, together, are
    the routes of a gateway of a file of several regions (which serves them all)."""
    (tmp_path / "cxg.toml").write_text(
        '[regions.east]\ngateway = { port = 8080 }\n\n[regions.west]\ncopies_of = ["east"]\ngateway = { port = 8081 }\n'
    )
    config = load_config(tmp_path / "cxg.toml")
    served = _routes(gateway_app(config, region_gateway(config)))
    public = _listed(_section(HTTP_API, "Endpoints"))
    internal = _listed(_section(HTTP_API, "Between the gateway's own parts"))
    assert sorted(public + internal) == served
    in_openapi = {(method.upper(), path) for path, item in document()["paths"].items() for method in item}
    assert in_openapi <= set(public)


def test_the_nodes_endpoint_table_lists_every_route_it_serves(tmp_path: Path) -> None:
    node = Node(Store(tmp_path, node="node-0"), get_backend("numpy"), processes=0)
    assert _listed(_section(SCAN_PROTOCOL, "Endpoints")) == _routes(node.app())


def test_the_scan_request_page_names_every_field_and_its_example_is_a_valid_request() -> None:
    page = SCAN_PROTOCOL.read_text()
    assert [field for field in REQUEST_SCHEMA["properties"] if f'"{field}"' not in page] == []
    example = json.loads(re.search(r"```json\n(.*?)```", _section(SCAN_PROTOCOL, "A scan request"), re.DOTALL)[1])
    jsonschema.validate(example, REQUEST_SCHEMA)
    ScanRequest.from_json(example)  # the node's own reader: ScanRequestError names what it refuses
