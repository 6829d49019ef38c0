"""The container images and the compose file of `docker/`, checked without a Docker engine: the
compose file against the Compose Specification, every command against `cxg`'s own parser and
configuration, the regions' wiring (nodes, gateways, Spark, loaders, volumes), the health checks
against the real applications, and the Dockerfiles' pins, users and build contexts."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import io
import json
import os
import re
import shlex
import sys
import tomllib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from fnmatch import fnmatch
from importlib import import_module, resources
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml
from aiohttp import web

from balancer import NativeBackend, NodeServer
from cxg import build_parser
from cxg.load import ingest_engine
from gpu_kernels import get_backend
from regions import Config, load_config, region_gateway
from storage import Node, Store
from tests.waiting import eventually_async

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
COMPOSE: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
DOCKERFILES = sorted(DOCKER.glob("*.Dockerfile"))
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
GLOBAL_OPTIONS = ("--config", "--set", "--region")  # cxg's options before the command, each with a value


@dataclass(frozen=True)
class Dockerfile:
    """A Dockerfile as its instructions: (KEYWORD, arguments), continuation lines joined."""

    path: Path
    instructions: tuple[tuple[str, str], ...]

    @classmethod
    def read(cls, path: Path) -> Dockerfile:
        """Its instructions, the base images named by ARGs before the first FROM (their defaults:
        what a build without --build-arg uses) written out in FROM and COPY --from."""
        instructions, pending, defaults = [], "", {}
        for raw in path.read_text().splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            keyword, _, rest = (pending + line).partition(" ")
            keyword, rest, pending = keyword.upper(), rest.strip(), ""
            if keyword == "ARG" and not any(k == "FROM" for k, _ in instructions):
                name, _, default = rest.partition("=")
                defaults[name] = default
            if keyword in ("FROM", "COPY"):
                rest = re.sub(r"\$\{(\w+)\}", lambda m: defaults.get(m[1], m[0]), rest)
            instructions.append((keyword, rest))
        return cls(path, tuple(instructions))

    def final(self, keyword: str) -> list[str]:
        """The arguments of every `keyword` instruction of the final stage."""
        last_from = max(i for i, (k, _) in enumerate(self.instructions) if k == "FROM")
        return [rest for k, rest in self.instructions[last_from:] if k == keyword]

    def exec_form(self, keyword: str) -> list[str]:
        """The last `keyword` (ENTRYPOINT, CMD) of the final stage, in exec (JSON) form."""
        found = self.final(keyword)
        assert found, f"{self.path.name} has no {keyword}"
        return json.loads(found[-1])

    @property
    def stages(self) -> set[str]:
        return {rest.split()[-1] for k, rest in self.instructions if k == "FROM" and " AS " in rest.upper()}

    @property
    def images(self) -> list[str]:
        """The images it builds on or copies from: FROM, COPY --from and RUN --mount from=."""
        found = [rest.split()[0] for k, rest in self.instructions if k == "FROM"]
        for keyword, rest in self.instructions:
            if keyword == "COPY":
                found += re.findall(r"--from=(\S+)", rest)
            elif keyword == "RUN":
                found += re.findall(r"--mount=\S*?\bfrom=([^,\s]+)", rest)
        return [image for image in found if image not in self.stages]

    @property
    def user(self) -> str:
        users = self.final("USER")
        assert users, f"{self.path.name} has no USER: it would run as root"
        return users[-1]

    @property
    def env(self) -> dict[str, str]:
        return dict(word.split("=", 1) for rest in self.final("ENV") for word in shlex.split(rest))

    @property
    def healthcheck(self) -> list[str]:
        """The command of the final stage's HEALTHCHECK (empty: none, or NONE)."""
        checks = self.final("HEALTHCHECK")
        if not checks or checks[-1].upper() == "NONE":
            return []
        _, found, command = checks[-1].partition("CMD ")
        assert found, f"{self.path.name}: HEALTHCHECK without CMD"
        return json.loads(command)

    def owned_directories(self, owner: str) -> set[str]:
        """The directories that `install -d -o OWNER` creates in the final stage."""
        owned = set()
        for run in self.final("RUN"):
            for command in run.split("&&"):
                words = shlex.split(command)
                if words[:2] == ["install", "-d"] and "-o" in words and words[words.index("-o") + 1] == owner:
                    owned |= {w for w in words[2:] if w.startswith("/")}
        return owned


@dataclass(frozen=True)
class Mount:
    kind: str  # bind or volume
    source: str
    read_only: bool


IMAGES = {path.name: Dockerfile.read(path) for path in DOCKERFILES}


def dockerfile_of(name: str) -> Dockerfile:
    build = SERVICES[name]["build"]
    assert (DOCKER / build["context"]).resolve() == ROOT, f"{name}: the build context is not the repository root"
    return IMAGES[Path(build["dockerfile"]).name]


def argv_of(name: str) -> list[str]:
    """The arguments `cxg` gets in service `name`: the image's ENTRYPOINT after `cxg`, then the command."""
    image = dockerfile_of(name)
    entrypoint = image.exec_form("ENTRYPOINT")
    assert entrypoint[0] == "cxg", f"{name}: the entry point is {entrypoint}, not cxg"
    command = SERVICES[name].get("command", image.exec_form("CMD"))
    return [*entrypoint[1:], *(shlex.split(command) if isinstance(command, str) else command)]


def role_of(argv: list[str]) -> str:
    """The command: `gateway`, `node`, `spark master`, `load tpch`, ..."""
    words = iter(argv)
    for word in words:
        if word in GLOBAL_OPTIONS:
            next(words)
            continue
        rest = [word, *words]
        return " ".join(rest[:2]) if word in ("spark", "load") else word
    raise AssertionError(f"no command in {argv}")


def region_of(argv: list[str]) -> str | None:
    return argv[argv.index("--region") + 1] if "--region" in argv else None


def services(role: str, region: str | None = None) -> list[str]:
    return [
        name
        for name in SERVICES
        if role_of(argv_of(name)) == role and (region is None or region_of(argv_of(name)) == region)
    ]


def parse(argv: list[str]) -> argparse.Namespace:
    """`cxg`'s parser on `argv`; a failure names the arguments and argparse's message."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            return build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"not a valid cxg command: cxg {shlex.join(argv)}\n{errors.getvalue().strip()}")


def mounts(name: str) -> dict[str, Mount]:
    """Service `name`'s mounts by their path in the container."""
    found = {}
    for volume in SERVICES[name].get("volumes", []):
        if isinstance(volume, dict):
            kind, source, target = volume["type"], volume["source"], volume["target"]
            read_only = volume.get("read_only", False)
        else:
            source, target, *mode = volume.split(":")
            kind = "bind" if source.startswith((".", "/", "~")) else "volume"
            read_only = "ro" in ",".join(mode).split(",")
        found[target] = Mount(kind, source, read_only)
    return found


def environment(name: str) -> dict[str, str]:
    env = SERVICES[name].get("environment", {})
    return dict(item.split("=", 1) for item in env) if isinstance(env, list) else {k: str(v) for k, v in env.items()}


def config_of(name: str) -> Config:
    """The configuration service `name` runs with: its --config file, mounted from docker/."""
    args = parse(argv_of(name))
    assert args.config is not None, f"{name}: no --config"
    mount = mounts(name).get(str(args.config))
    assert mount is not None and mount.kind == "bind", f"{name}: nothing is mounted at {args.config}"
    assert mount.read_only, f"{name}: the configuration is mounted writable"
    return load_config(DOCKER / mount.source, args.set, args.region)


def host_port(port: str | int | dict[str, Any]) -> str | None:
    """The host port a `ports` entry publishes (None: an ephemeral one)."""
    if isinstance(port, dict):
        return str(port["published"]) if "published" in port else None
    parts = str(port).split("/")[0].split(":")
    return parts[-2] if len(parts) > 1 else None


def health_url(name: str) -> str | None:
    """The URL service `name`'s health check fetches (None: it has none)."""
    image = dockerfile_of(name)
    if SERVICES[name].get("healthcheck", {}).get("disable") or not image.healthcheck:
        return None
    return environment(name).get("CXG_HEALTH_URL", image.env["CXG_HEALTH_URL"])


# ---- the compose file -------------------------------------------------------------------------------


def test_compose_file_follows_the_compose_specification() -> None:
    vendor = resources.files("check_jsonschema.builtin_schemas.vendor")
    schema = json.loads(vendor.joinpath("compose-spec.json").read_text())
    assert schema["title"] == "Compose Specification"
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"/{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(COMPOSE)]
    assert errors == []
    broken = copy.deepcopy(COMPOSE)
    next(iter(broken["services"].values()))["depends_on"] = {"gateway-eu": {"condition": "when-it-feels-like-it"}}
    assert not validator.is_valid(broken)


@pytest.mark.parametrize("name", SERVICES)
def test_every_service_runs_a_cxg_command_with_its_configuration(name: str) -> None:
    config = config_of(name)
    assert config.name == region_of(argv_of(name)), f"{name}: runs region {config.name}"
    stem = dockerfile_of(name).path.name.removesuffix(".Dockerfile")
    assert SERVICES[name]["image"] == f"cxg-{stem}:{PYPROJECT['project']['version']}"


def test_every_dockerfile_is_built_by_the_compose_file() -> None:
    assert {Path(service["build"]["dockerfile"]).name for service in SERVICES.values()} == set(IMAGES)


@pytest.mark.parametrize("name", services("node"))
def test_nodes_advertise_their_service_name_to_their_regions_gateway(name: str) -> None:
    args = parse(argv_of(name))
    assert args.kind == "native"
    assert args.host == "0.0.0.0"
    assert args.advertise == name, f"{name} advertises {args.advertise}"
    upstream = urlsplit(args.upstream)
    assert upstream.hostname in services("gateway", region_of(argv_of(name)))
    assert upstream.port == config_of(upstream.hostname).gateway.port
    data = mounts(name).get(args.data)
    assert data is not None and data.kind == "volume", f"{name}: {args.data} is not a named volume"
    sharing = [other for other in SERVICES if data in mounts(other).values()]
    assert sharing == [name], f"{name} shares its data volume with {sharing}"
    names = [parse(argv_of(node)).name for node in services("node", region_of(argv_of(name)))]
    assert names.count(args.name) == 1, f"two nodes of region {region_of(argv_of(name))} are {args.name}"


@pytest.mark.parametrize("name", services("gateway"))
def test_gateways_run_joins_on_their_regions_spark_cluster_through_the_data_source(name: str) -> None:
    config = config_of(name)
    region = region_of(argv_of(name))
    assert config.gateway.host == "0.0.0.0"
    published = urlsplit(config.regions[config.name].url)  # where the other region's gateway reaches it
    assert (published.hostname, published.port) == (name, config.gateway.port)
    master = urlsplit(config.spark.master)
    assert master.scheme == "spark" and master.hostname in services("spark master", region)
    master_args = parse(argv_of(master.hostname))
    assert (master_args.host, master_args.port) == (master.hostname, master.port)
    assert config.spark.exchange_mode() == "source"
    workers = services("spark worker", region)
    assert workers and all(parse(argv_of(w)).master == config.spark.master for w in workers)


@pytest.mark.parametrize("name", services("load tpch"))
def test_a_loader_loads_its_running_region_once_its_nodes_have_joined(name: str) -> None:
    """A Spark cluster cannot write into the loader's directories: the load goes to the running
    nodes that the region's gateway lists (`--live`), so it waits until the gateway is healthy, which
    its health check makes mean every node of the region has joined, and until the worker is up."""
    service, args, config = SERVICES[name], parse(argv_of(name)), config_of(name)
    region = region_of(argv_of(name))
    assert service["restart"] == "no"
    assert service["healthcheck"] == {"disable": True}
    assert args.live and ingest_engine(config, args.engine, args.live) == "spark"
    gateway = urlsplit(args.url)
    assert gateway.hostname in services("gateway", region)
    assert gateway.port == config_of(gateway.hostname).gateway.port
    assert service["depends_on"][gateway.hostname] == {"condition": "service_healthy"}
    probe = environment(gateway.hostname)
    nodes = [node for node in services("node", region) if not SERVICES[node].get("profiles")]
    assert urlsplit(health_url(gateway.hostname)).path == "/readyz"
    assert int(probe["CXG_HEALTH_NODES"]) == len(nodes), f"{gateway.hostname} is healthy before {nodes} joined"
    (worker,) = services("spark worker", region)
    assert service["depends_on"][worker] == {"condition": "service_healthy"}
    assert parse(argv_of(worker)).master == config.spark.master


def test_volumes_dependencies_and_host_ports() -> None:
    used = {m.source for name in SERVICES for m in mounts(name).values() if m.kind == "volume"}
    assert used == set(COMPOSE["volumes"])
    for name, service in SERVICES.items():
        for target, condition in service.get("depends_on", {}).items():
            assert target in SERVICES, f"{name} depends on {target}, no such service"
            if condition["condition"] == "service_healthy":
                assert health_url(target), f"{name} waits for {target} to be healthy: it has no health check"
    published = [host_port(port) for service in SERVICES.values() for port in service.get("ports", [])]
    published = [port for port in published if port is not None]
    assert published and len(published) == len(set(published)), published


@pytest.mark.parametrize("name", SERVICES)
def test_volume_mount_points_belong_to_the_images_user(name: str) -> None:
    """A named volume starts as a copy of the image's directory: owned by the user if it is."""
    image = dockerfile_of(name)
    owned = image.owned_directories(image.user.split(":")[0])
    for target, mount in mounts(name).items():
        if mount.kind == "volume":
            assert target in owned, f"{name}: {target} is not created for {image.user} in {image.path.name}"


# ---- health checks --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [name for name in SERVICES if health_url(name)])
def test_health_checks_reach_the_port_each_service_listens_on(name: str) -> None:
    url = urlsplit(health_url(name))
    args = parse(argv_of(name))
    listening = {
        "gateway": lambda: config_of(name).gateway.port,
        "node": lambda: args.port,
        "spark master": lambda: args.webui_port,
        "spark worker": lambda: args.webui_port,
    }[role_of(argv_of(name))]()
    assert (url.hostname, url.port) == ("127.0.0.1", listening)


def _gateway_app(tmp: Path) -> web.Application:
    return region_gateway(config_of(services("gateway")[0])).app()


def _node_app(tmp: Path) -> web.Application:
    return Node(Store(tmp, node="node-0"), get_backend("numpy"), processes=0).app()


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[int]:
    """`app` served on a free loopback port, which it yields."""
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def _probe(image: Dockerfile, env: dict[str, str], port: int, path: str | None = None) -> int:
    """The exit status of `image`'s health check with `env`, its URL moved to `port` on the
    loopback (and to `path`)."""
    url = urlsplit(env["CXG_HEALTH_URL"])
    moved = url._replace(netloc=f"127.0.0.1:{port}", path=path or url.path).geturl()
    command = [sys.executable if word == "python" else word for word in image.healthcheck]
    process = await asyncio.create_subprocess_exec(*command, env={**os.environ, **env, "CXG_HEALTH_URL": moved})
    return await asyncio.wait_for(process.wait(), 30)


@pytest.mark.parametrize(
    ("dockerfile", "app"),
    [("gateway.Dockerfile", _gateway_app), ("node.Dockerfile", _node_app), ("node-cuda.Dockerfile", _node_app)],
)
def test_health_checks_pass_on_the_real_application_and_fail_off_it(
    dockerfile: str, app: Callable[[Path], web.Application], tmp_path: Path
) -> None:
    image = IMAGES[dockerfile]

    async def probes() -> tuple[int, int]:
        async with serving(app(tmp_path)) as port:
            path = urlsplit(image.env["CXG_HEALTH_URL"]).path
            return await _probe(image, image.env, port), await _probe(image, image.env, port, path + "-nowhere")

    assert asyncio.run(probes()) == (0, 1)


@pytest.mark.parametrize("name", services("gateway"))
def test_a_gateway_is_healthy_once_every_node_of_its_region_has_joined(name: str, tmp_path: Path) -> None:
    image, env = dockerfile_of(name), {**dockerfile_of(name).env, **environment(name)}
    needed = int(env["CXG_HEALTH_NODES"])
    gateway = region_gateway(config_of(name))

    async def probes() -> list[int]:
        statuses, joined = [], []
        async with serving(gateway.app()) as port:
            for i in range(needed):
                statuses.append(await _probe(image, env, port))
                node = NodeServer(f"node-{i}", NativeBackend(Store(tmp_path / str(i), node=f"node-{i}")), 1)
                joined.append(asyncio.create_task(node.run(f"http://127.0.0.1:{port}")))
                await eventually_async(lambda n=i + 1: len(gateway.balancer.nodes()) == n, 30, f"node-{i} joined")
            statuses.append(await _probe(image, env, port))
            for node in joined:
                node.cancel()
            await asyncio.gather(*joined, return_exceptions=True)
        return statuses

    assert asyncio.run(asyncio.wait_for(probes(), 60)) == [1] * needed + [0]


# ---- the images -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfiles_are_pinned_run_as_a_user_and_check_their_health(path: Path) -> None:
    image = IMAGES[path.name]
    for reference in image.images:
        name, _, tag = reference.rpartition(":")
        assert name and "/" not in tag and tag != "latest", f"{reference} is not pinned to a tag"
        assert re.search(r"\d+\.\d+", tag), f"{reference}: the tag names no version"
    assert image.user.split(":")[0] not in ("root", "0")
    assert image.healthcheck, f"{path.name} has no HEALTHCHECK"


@pytest.mark.parametrize("name", ["gateway.Dockerfile", "node.Dockerfile", "spark.Dockerfile"])
def test_the_cpu_images_take_their_bases_as_build_arguments(name: str) -> None:
    """So that they build from a local base where no registry is reachable (docker/README.md)."""
    froms = re.findall(r"^FROM (\S+)", (DOCKER / name).read_text(), re.MULTILINE)
    assert froms and all(re.fullmatch(r"\$\{[A-Z_]+\}", base) for base in froms), froms
    assert IMAGES[name].images  # each with a pinned default (test_dockerfiles_are_pinned...)


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_images_install_the_project_and_start_cxg(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = IMAGES[path.name]
    installs = [run for run in image.final("RUN") if "--mount=type=bind,target=/src" in run]
    assert len(installs) == 1, f"{path.name}: the project is not installed from the build context"
    (install,) = installs
    assert "pip install --no-cache-dir /src" in install or 'uv pip install --no-cache "/src[' in install
    extras = re.findall(r"/src\[([\w,-]+)\]", install)
    assert all(extra in PYPROJECT["project"]["optional-dependencies"] for e in extras for extra in e.split(","))

    (script,) = image.exec_form("ENTRYPOINT")[:1]
    declared = PYPROJECT["project"]["scripts"][script]
    (entry,) = entry_points(group="console_scripts", name=script)
    module, _, attribute = declared.partition(":")
    assert entry.value == declared and entry.load() is getattr(import_module(module), attribute)

    monkeypatch.chdir(tmp_path)  # no ./cxg.toml, as in the image's working directory
    args = parse(image.exec_form("ENTRYPOINT")[1:] + image.exec_form("CMD"))
    load_config(args.config, args.set, args.region)


def test_the_cuda_node_uses_cuda_12_the_gpu_extra_and_the_cupy_kernels() -> None:
    image = IMAGES["node-cuda.Dockerfile"]
    assert any(fnmatch(ref, "nvidia/cuda:12.*-runtime-ubuntu*") for ref in image.images), image.images
    assert '"/src[gpu]"' in " ".join(image.final("RUN"))
    assert any(r.startswith("cupy-cuda12x==") for r in PYPROJECT["project"]["optional-dependencies"]["gpu"])
    assert parse(image.exec_form("CMD")).backend == "cupy"
    gpu_nodes = [n for n in services("node") if dockerfile_of(n) is image]
    assert gpu_nodes and all(parse(argv_of(n)).backend == "cupy" for n in gpu_nodes)
    for name in gpu_nodes:
        (device,) = SERVICES[name]["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]


def test_drivers_and_executors_run_one_python_and_java_17() -> None:
    """Executors run the driver's interpreter (spark.pyspark.python): the gateway image (drivers) and
    the Spark image (executors) share their Python; both carry a Java 17 runtime for Spark."""
    gateway, spark = IMAGES["gateway.Dockerfile"], IMAGES["spark.Dockerfile"]
    (python,) = {ref for ref in gateway.images if ref.startswith("python:")}
    assert python in spark.images
    cuda_python = re.search(r"--python (\S+)", " ".join(IMAGES["node-cuda.Dockerfile"].final("RUN")))
    assert cuda_python and python.split(":")[1].startswith(cuda_python[1] + "-")
    for image in (gateway, spark):
        java_home = image.env["JAVA_HOME"]
        copies = [rest for rest in image.final("COPY") if rest.endswith(f" {java_home} {java_home}")]
        assert copies, f"{image.path.name}: no Java runtime at {java_home}"
        (stage,) = re.findall(r"--from=(\S+)", copies[0])
        (jre,) = [rest.split()[0] for k, rest in image.instructions if k == "FROM" and rest.endswith(f" AS {stage}")]
        assert jre.split(":")[1].startswith("17."), jre
        assert f"{java_home}/bin" in image.env["PATH"]
    assert spark.env["SPARK_WORKER_DIR"] in spark.owned_directories(spark.user)  # not under the wheel


# ---- the build context --------------------------------------------------------------------------------


def _pattern(text: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regular expression over paths relative to the context."""
    parts = re.split(r"(\*\*/|\*\*|\*|\?)", text.strip("/"))
    wildcards = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}
    return re.compile("".join(wildcards.get(part, re.escape(part)) for part in parts))


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or a folder above it decides; `!` keeps."""
    parents = ["/".join(path.split("/")[:i]) for i in range(1, path.count("/") + 2)]
    result = False
    for pattern in patterns:
        if any(_pattern(pattern.removeprefix("!")).fullmatch(p) for p in parents):
            result = not pattern.startswith("!")
    return result


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_each_dockerfiles_ignore_file_lets_in_what_the_install_reads(path: Path) -> None:
    ignore = path.with_name(f"{path.name}.dockerignore")  # BuildKit reads it in place of the context's
    lines = [line.strip() for line in ignore.read_text().splitlines()]
    patterns = [line for line in lines if line and not line.startswith("#")]
    packages = [
        d
        for d in ROOT.iterdir()
        if (d / "__init__.py").is_file()
        and any(fnmatch(d.name, p) for p in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"])
    ]
    assert {d.name for d in packages} >= {"cxg", "gateway", "storage"}
    needed = ["pyproject.toml", PYPROJECT["project"]["readme"]] + [
        f.relative_to(ROOT).as_posix()
        for d in packages
        for f in d.rglob("*")
        if f.is_file() and "__pycache__" not in f.parts
    ]
    assert [f for f in needed if ignored(f, patterns)] == []
    for left_out in (".git/HEAD", ".venv/bin/python", "data/node-0/x", "tests/test_docker.py", "cxg.egg-info/PKG-INFO"):
        assert ignored(left_out, patterns), left_out
    assert ignored("gateway/__pycache__/server.cpython-311.pyc", patterns)
