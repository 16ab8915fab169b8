#!/usr/bin/env bash
# The TypeScript SDK's checks: install (npm ci, pinned by package-lock.json; skipped when the
# lock is unchanged), build (tsc -> dist/), type check (tsc --noEmit, strict), lint (eslint +
# typescript-eslint), then the tests (node:test, compiled by tsc) against a real jobwire:
# unit tests, the Client and Worker suites, every conformance scenario of
# clients/conformance/scenarios.json, `npm pack` installed into a scratch project, and the
# sign-up demo. The server is $JOBWIRE_BIN (else `jobwire` on the PATH).
set -euo pipefail
cd "$(dirname "$0")"
if [ -z "${JOBWIRE_BIN:-}" ]; then
  JOBWIRE_BIN="$(command -v jobwire || true)"
  [ -n "$JOBWIRE_BIN" ] || { echo "clients/node/test.sh: set JOBWIRE_BIN or put jobwire on the PATH" >&2; exit 1; }
fi
export JOBWIRE_BIN
command -v redis-server >/dev/null || { echo "clients/node/test.sh: redis-server is needed (scripts/setup.sh)" >&2; exit 1; }
if ! cmp -s package-lock.json node_modules/.jobwire-lock 2>/dev/null; then
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.jobwire-lock
fi
npm run --silent build
npx tsc --noEmit -p tsconfig.json
echo "tsc --noEmit: ok"
npx eslint .
echo "eslint: ok"
npm test
