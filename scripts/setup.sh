#!/usr/bin/env bash
# Installs what jobwire's demo and tests need and is missing on a Debian/Ubuntu machine:
# redis-server (also run as a sentinel: `redis-server <conf> --sentinel`) and redis-tools
# (redis-cli, which the cluster tests use to create a cluster), openssl (the demo's --secure
# mode and the TLS tests make throwaway certificates), and a Python venv at .venv with the gRPC
# client packages, grpcurl, Playwright and the Python SDK (clients/python, installed editable:
# the sign-up demo, tests/python and tests/ui use it);
# with --test also Prometheus (promtool and the server, for the alert-rule tests) and Debian's
# Chromium (/usr/bin/chromium, which the dashboard's browser tests in tests/ui drive through
# Playwright from the venv; Playwright's own browser download is never used).
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  echo "setup: installing redis-server and redis-tools"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq redis-server redis-tools >/dev/null
fi
if [ "${1:-}" = "--test" ] && { ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; }; then
  echo "setup: installing prometheus (promtool and server, for the alert-rule tests)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq prometheus >/dev/null
  # The package starts a system Prometheus on :9090; the tests run their own on free ports.
  (as_root systemctl disable --now prometheus || as_root service prometheus stop) >/dev/null 2>&1 || true
fi
if [ "${1:-}" = "--test" ] && [ ! -x /usr/bin/chromium ]; then
  echo "setup: installing chromium (the dashboard's browser tests, tests/ui)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq chromium >/dev/null
fi
if ! command -v openssl >/dev/null 2>&1; then
  echo "setup: installing openssl (throwaway certificates: demo --secure, the TLS tests)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq openssl >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; install the Rust toolchain (https://rustup.rs) and rerun" >&2
  exit 1
fi
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "setup: installing python3-venv"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq python3-venv >/dev/null
fi
if [ ! -x .venv/bin/python ] || [ ! -x .venv/bin/grpcurl ] \
  || ! .venv/bin/python -c 'import grpc, grpc_tools, grpc_health, grpc_reflection, grpc_status, pytest, playwright, jobwire' >/dev/null 2>&1; then
  echo "setup: creating .venv with the Python gRPC packages, Playwright and the Python SDK (clients/python)"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r examples/python/requirements.txt -e ./clients/python
fi
