#!/usr/bin/env bash
# Prepares a fresh machine: a JDK (for Spark), MariaDB (for the tests) and the project's virtual environment
# with pinned packages.
# Usage: scripts/bootstrap.sh [EXTRA ...]   e.g. scripts/bootstrap.sh dev
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
step() { echo "bootstrap: $*" >&2; }

apt_install() {
    step "installing $* with apt-get"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

command -v java >/dev/null 2>&1 || apt_install openjdk-17-jre-headless
# the tests start a real MariaDB server (the mysql node backend) in a temporary directory
has_mariadb() { command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || [ -x /usr/sbin/mysqld ]; }
case " $* " in *" dev "*) has_mariadb || apt_install mariadb-server ;; esac
# the web console's tests drive Debian's Chromium through its ChromeDriver
case " $* " in *" dev "*) [ -x /usr/bin/chromedriver ] || apt_install chromium chromium-driver ;; esac

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "bootstrap: Python >= 3.11 is required ($python is $("$python" --version 2>&1))" >&2
    exit 1
fi

extras=$(IFS=,; echo "$*")
spec="."
[ -n "$extras" ] && spec=".[${extras}]"
stamp=".venv/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)-${extras:-base}"

if [ ! -x .venv/bin/python ]; then
    step "creating the virtual environment .venv"
    "$python" -m venv .venv
fi
if [ ! -f "$stamp" ]; then
    step "upgrading pip"
    .venv/bin/python -m pip install -q --upgrade pip
    step "installing cxg and its pinned packages${extras:+ (extras: $extras)} into .venv: pyspark and pyarrow are large, this takes a minute or two"
    .venv/bin/python -m pip install -q -e "$spec"
    rm -f .venv/.installed-*
    touch "$stamp"
    step "installed: .venv/bin/cxg"
else
    step ".venv is up to date"
fi
