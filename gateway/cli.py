"""The `cxg` command line: one entry point, one subcommand per job."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from balancer import cli as balancer_cli
from gateway import commands, demo
from gateway.config import ConfigError, load_config
from gpu_kernels.backend import BackendUnavailable
from loadtests import cli as loadtest_cli
from storage import cli as storage_cli
from storage.errors import StorageError


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
    sub = parser.add_subparsers(dest="command", required=True)
    demo.register(sub)
    commands.register(sub)
    loadtest_cli.register(sub)
    storage_cli.register(sub)
    balancer_cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args.config, args.set)
        return args.func(args, config)
    except (StorageError, ConfigError, BackendUnavailable) as e:
        print(f"cxg: error [{e.code}]: {e}", file=sys.stderr)
        return 2
    except ConnectionError as e:
        print(f"cxg: error [unreachable]: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
