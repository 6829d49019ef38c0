"""The `cxg` command: the parser, one subcommand per job, and the one place where a command's
failure becomes `cxg: error [code]: message` and exit status 2."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cxg import (
    client_commands,
    config_commands,
    demo,
    load,
    redistribute,
    serve,
    simulate,
    spark_commands,
    storage_commands,
    stream_commands,
)
from gateway import GatewayError
from gpu_kernels import BackendUnavailable
from loadtests import cli as loadtest_cli
from regions import load_config
from storage import ConfigError, StorageError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cxg", description="Compressed, GPU-accelerated analytical database service.")
    parser.add_argument("--config", type=Path, help="TOML configuration file (default ./cxg.toml if present)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.OPTION=VALUE",
        help="override one configuration option, e.g. --set gateway.port=9090 (repeatable)",
    )
    parser.add_argument(
        "--region",
        metavar="NAME",
        help="with a file of several regions ([regions.NAME] tables): which one (default: its default region)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo.register(sub)
    serve.register(sub)
    client_commands.register(sub)
    stream_commands.register(sub)
    loadtest_cli.register(sub)
    load.register(sub)
    redistribute.register(sub)
    storage_commands.register(sub)
    simulate.register(sub)
    spark_commands.register(sub)
    config_commands.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args.config, args.set, args.region)
        return args.func(args, config)
    except GatewayError as e:
        print(f"cxg: error [{e.code}]: {e.message}", file=sys.stderr)
    except (StorageError, ConfigError, BackendUnavailable) as e:
        print(f"cxg: error [{e.code}]: {e}", file=sys.stderr)
    except ConnectionError as e:
        print(f"cxg: error [unreachable]: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return 2
