#!/usr/bin/env bash
# Guards the public wire contract and the generated client code:
#   1. `buf lint` on proto/ (STANDARD rules, proto/buf.yaml);
#   2. `buf breaking` against the previous commit (FILE rules): a field renumbered, renamed,
#      retyped or removed, or an RPC removed, fails here. JOBWIRE_BREAKING_AGAINST names
#      another git ref to compare with (for example main, before a merge);
#   3. regenerates every SDK's code (clients/<lang>/generate.sh, each `buf generate` with its
#      own clients/<lang>/buf.gen.yaml and local plugins) and fails when the committed code
#      differs from what proto/ generates now.
# buf comes from the npm registry (@bufbuild/buf, pinned in scripts/buf/package-lock.json) and
# runs offline.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x scripts/buf/node_modules/.bin/buf ]; then
  (cd scripts/buf && npm ci --no-audit --no-fund --loglevel=error)
fi
export BUF="$PWD/scripts/buf/node_modules/.bin/buf"
"$BUF" --version
"$BUF" lint proto
echo "buf lint: ok"
against="${JOBWIRE_BREAKING_AGAINST:-HEAD~1}"
if git rev-parse --verify --quiet "$against^{commit}" >/dev/null; then
  # proto/buf.yaml's FILE rules; the other side is proto/ as committed at $against.
  (cd proto && "$BUF" breaking --against "../.git#ref=$(git rev-parse "$against"),subdir=proto")
  echo "buf breaking against $against: ok"
else
  echo "buf breaking: no commit $against to compare with (a shallow clone?); skipped" >&2
fi
for gen in clients/*/generate.sh; do
  [ -f "$gen" ] || continue
  echo "regenerating with $gen"
  bash "$gen"
done
if ! git diff --exit-code --stat -- clients || [ -n "$(git status --porcelain --untracked-files=all -- clients | grep -v '^ M' || true)" ]; then
  git status --porcelain --untracked-files=all -- clients >&2
  echo "the generated client code is not what proto/ generates: run the generate.sh scripts and commit" >&2
  exit 1
fi
echo "generated client code: fresh"
