#!/usr/bin/env bash
# Browser test of the admin UI: headless Chromium against a real
# `vak admin serve` on a temp home and a trusted copy of the fixture project.
#
#   crates/vak-admin/browser/run.sh
#
# Installs what is missing (Debian's chromium, playwright-core from the
# committed package-lock.json; never a downloaded browser), builds `vak`,
# runs scenario.mjs, and writes screenshots to target/browser-screenshots/.
# Exits non-zero when any check fails.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
shots="$root/target/browser-screenshots"

if ! command -v chromium >/dev/null 2>&1; then
  echo "run.sh: installing Debian's chromium" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if ! command -v node >/dev/null 2>&1; then
  echo "run.sh: installing node and npm" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
if [ ! -d "$here/node_modules/playwright-core" ]; then
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi

(cd "$root" && cargo build --quiet -p vak-cli)
vak="$target/debug/vak"

work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

cp -a "$root/fixtures/home" "$work/home"
cp -a "$root/fixtures/projects/myproj" "$work/myproj"
# A directory layer below the project root, for the scope control.
mkdir -p "$work/myproj/services/payments/.vak/prompts"
printf -- '- Never log card numbers.\n' >"$work/myproj/services/payments/.vak/prompts/guardrails.md"
"$vak" trust --home "$work/home" "$work/myproj" >/dev/null
# A managed layer the page shows read-only; its one file is a note for a
# surface the scenario never resolves, so every other figure stays the same.
mkdir -p "$work/managed/surface/desktop"
printf 'This machine is managed by ACME IT.\n' >"$work/managed/surface/desktop/surface-note.md"
chmod 0755 "$work/managed" "$work/managed/surface" "$work/managed/surface/desktop"
chmod 0644 "$work/managed/surface/desktop/surface-note.md"

rm -rf "$shots"
mkdir -p "$shots"
env -u VAK_ADMIN_TOKEN VAK_MANAGED_DIR="$work/managed" "$vak" admin serve --home "$work/home" --project "$work/myproj" \
  --listen 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.err" &
server_pid=$!

url=""
# Up to a minute for the server to print its URL (a loaded machine is slow to start it).
for _ in $(seq 1 600); do
  url="$(head -n 1 "$work/serve.out" 2>/dev/null || true)"
  case "$url" in http://*) break ;; esac
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "run.sh: vak admin serve exited:" >&2
    cat "$work/serve.err" >&2
    exit 1
  fi
  sleep 0.1
done
case "$url" in http://*) ;; *) echo "run.sh: vak admin serve printed no URL" >&2; exit 1 ;; esac
echo "run.sh: $(cat "$work/serve.out" | tr '\n' ' ')"
token="$(cat "$work/home/.vak/admin.token")"

node "$here/scenario.mjs" "$url" "$token" "$work/home" "$work/myproj" "$shots" "$vak"
