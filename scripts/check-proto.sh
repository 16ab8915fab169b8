#!/usr/bin/env bash
# Guards the public wire contract and the generated client code:
#   1. `buf lint` on proto/ (STANDARD rules, proto/buf.yaml);
#   2. `buf breaking` (FILE rules) against every version of proto/ published since the
#      contract was frozen (each commit since proto/buf.yaml was added that changed proto/):
#      a field renumbered, renamed, retyped or removed, or an RPC removed, fails here however
#      many commits ago its version landed. JOBWIRE_BREAKING_AGAINST names one git ref to
#      compare with instead (for example main, before a merge);
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
breaking_against() {
  # proto/buf.yaml's FILE rules; the other side is proto/ as committed at $1.
  (cd proto && "$BUF" breaking --against "../.git#ref=$(git rev-parse "$1"),subdir=proto")
  echo "buf breaking against $(git rev-parse --short "$1"): ok"
}
if [ -n "${JOBWIRE_BREAKING_AGAINST:-}" ]; then
  breaking_against "$JOBWIRE_BREAKING_AGAINST"
else
  frozen="$(git log --diff-filter=A --format=%H -- proto/buf.yaml | tail -n 1)"
  if [ -z "$frozen" ] || [ "$(git rev-parse --is-shallow-repository)" = true ]; then
    echo "buf breaking: the history of proto/ is not here (a shallow clone?); skipped" >&2
  else
    for c in $(git log --format=%H "$frozen^..HEAD" -- proto); do
      breaking_against "$c"
    done
  fi
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
