#!/usr/bin/env bash
# Run every lab (default: labs/*.ipynb) in a real JupyterLab with headless Chromium, the way .ci/run does.
#   tests/browser/run_labs.sh [notebook.ipynb ...]
# Environment: SMOKE_PORT (default 8890), SMOKE_OUT (screenshots, default .ci/artifacts/browser),
#   VENV (default .venv), CHROMIUM, NODE_PATH (a node_modules holding playwright-core), and the
#   SMOKE_* variables of smoke_jupyterlab.mjs. Starts a token-protected server with autosave off,
#   stops it on exit, and exits with the smoke test's status.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV:-.venv}
PORT=${SMOKE_PORT:-8890}
export SMOKE_OUT=${SMOKE_OUT:-$PWD/.ci/artifacts/browser}
# Wrong tries stay in each kernel's memory (a fresh learner's first session), not in this machine's
# <vramlab cache>/check_tries.json, which a second run would otherwise inherit (vramlab.checks._core).
export VRAMLAB_TRIES_FILE=${VRAMLAB_TRIES_FILE:-off}
export VRAMLAB_RAN_FILE=${VRAMLAB_RAN_FILE:-off}
mkdir -p "$SMOKE_OUT"
if [ "$#" -gt 0 ]; then notebooks=("$@"); else notebooks=(labs/*.ipynb); fi

token=$("$VENV/bin/python" -c 'import secrets; print(secrets.token_hex(16))')
settings=$(mktemp -d)
workspaces=$(mktemp -d)   # its own workspaces: other servers' (half-written) workspace files cannot break this one
mkdir -p "$settings/@jupyterlab/docmanager-extension" "$settings/@jupyterlab/notebook-extension"
echo '{"autosave": false}' > "$settings/@jupyterlab/docmanager-extension/plugin.jupyterlab-settings"
# Render every cell (JupyterLab 4 otherwise skips off-screen cells): whole-notebook screenshots and checks.
echo '{"windowingMode": "none"}' > "$settings/@jupyterlab/notebook-extension/tracker.jupyterlab-settings"
root_flag=$([ "$(id -u)" = 0 ] && echo --allow-root || true)
JUPYTERLAB_SETTINGS_DIR="$settings" JUPYTERLAB_WORKSPACES_DIR="$workspaces" "$VENV/bin/jupyter" lab --no-browser $root_flag --port "$PORT" \
    --ServerApp.port_retries=0 --ServerApp.ip=127.0.0.1 --IdentityProvider.token="$token" \
    --ServerApp.root_dir="$PWD" > "$SMOKE_OUT/jupyterlab.log" 2>&1 &
server=$!
cleanup() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$settings" "$workspaces"; }
trap cleanup EXIT
up=0
for _ in $(seq 120); do
  # Python, not curl: curl is missing on minimal machines.
  if "$VENV/bin/python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" \
       "http://127.0.0.1:$PORT/api/status?token=$token" 2>/dev/null; then up=1; break; fi
  if ! kill -0 "$server" 2>/dev/null; then echo "browser: JupyterLab did not start (port $PORT in use?); see $SMOKE_OUT/jupyterlab.log"; exit 2; fi
  sleep 1
done
if [ "$up" != 1 ]; then echo "browser: JupyterLab did not answer within 120 s; see $SMOKE_OUT/jupyterlab.log"; exit 2; fi
start=$(date +%s)
status=0
SMOKE_ROOT="$PWD" node tests/browser/smoke_jupyterlab.mjs --url "http://127.0.0.1:$PORT/lab?token=$token" \
    "${notebooks[@]}" || status=$?
echo "browser: ${#notebooks[@]} notebook(s) in $(( $(date +%s) - start )) s; screenshots in $SMOKE_OUT"
exit $status
