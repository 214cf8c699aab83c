#!/usr/bin/env bash
# For developers: prepares .gpu-host/ (ignored by git) to run Quire on a GPU
# host that has no Node.js and no network: a node binary (shared/gpu-host/pack.sh)
# plus the production node_modules and the built dist/.
# On the host:  source .gpu-host/env.sh && ln -sfn .gpu-host/node_modules node_modules
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
[[ -f .gpu-host/node.xz ]] || ../shared/gpu-host/pack.sh "$root"
tmp="$(mktemp -d)"
cp package.json package-lock.json "$tmp/"
(cd "$tmp" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund >/dev/null)
rm -rf .gpu-host/node_modules
mv "$tmp/node_modules" .gpu-host/node_modules
rm -rf "$tmp"
npx tsc -p .
du -sh .gpu-host dist
