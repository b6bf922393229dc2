#!/usr/bin/env bash
# End-to-end test of the extension in a real VS Code: code-server in headless Chromium, driven by
# playwright-core (scripts/e2e.mjs).
#
#   1. sets up Node 24, code-server and Chromium once (scripts/e2e-setup.sh, cached in ~/.cache/accelopt-e2e),
#   2. builds, unit-tests and packages the extension (npm ci, npm run build, npm test, npm run package),
#   3. installs the .vsix into a fresh code-server (fresh user-data, extensions and XDG folders),
#   4. opens a temporary workspace holding NKIBench's small silu kernel and checks, in the browser:
#      code lens, Problems panel, hover, Optimize with progress, the rewrite quick fix, apply, undo,
#      and a screenshot of the report panel.
#
# Environment: ACCELOPT_E2E_PYTHON  Python with accelopt installed (default: python3 on PATH)
#              ACCELOPT_E2E_ARTIFACTS  where screenshots and logs go (default: <repo>/artifacts/extension)
#              ACCELOPT_E2E_CACHE  the setup cache (default: ~/.cache/accelopt-e2e)
#              ACCELOPT_E2E_KEEP=1  keep the temporary folders
#              ACCELOPT_E2E_TRACE=1  log every LSP message (with its content) in accelopt-output.log
# Exit codes: 0 passed, 1 a check failed, 3 the machine cannot run it (setup failed).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
EXT_DIR="$(dirname "$HERE")"
REPO="$(dirname "$EXT_DIR")"
ARTIFACTS="${ACCELOPT_E2E_ARTIFACTS:-$REPO/artifacts/extension}"
PYTHON="${ACCELOPT_E2E_PYTHON:-$(command -v python3)}"
T0=$(date +%s)
log() { printf '[e2e %3ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }

mkdir -p "$ARTIFACTS"
rm -f "$ARTIFACTS"/*.png "$ARTIFACTS"/summary.json

# 1. Tools.
log "setting up Node 24, code-server and Chromium"
SETUP_OUT="$(bash "$HERE/e2e-setup.sh")" || exit 3
NODE24="$(sed -n 's/^node=//p' <<<"$SETUP_OUT")"
CODE_SERVER="$(sed -n 's/^code_server=//p' <<<"$SETUP_OUT")"
CHROMIUM="$(sed -n 's/^chromium=//p' <<<"$SETUP_OUT")"

# 2. The extension. `npm ci` only when package-lock.json changed since the last install here.
log "building the extension"
cd "$EXT_DIR"
if ! cmp -s package-lock.json node_modules/.package-lock.json.ci 2>/dev/null; then
  npm ci --no-audit --no-fund --loglevel=error >&2
  cp package-lock.json node_modules/.package-lock.json.ci
fi
npm run --silent build >&2
npm test --silent >"$ARTIFACTS/unit-tests.tap" 2>&1 || { cat "$ARTIFACTS/unit-tests.tap" >&2; log "unit tests failed"; exit 1; }
grep -E '^# (pass|fail)' "$ARTIFACTS/unit-tests.tap" | tr '\n' ' ' >&2; echo >&2
npm run --silent package >&2
VSIX="$EXT_DIR/accelopt.vsix"
log "packaged $(du -k "$VSIX" | cut -f1) KB: $VSIX"

# 3. A fresh code-server home and a workspace with the small silu kernel.
RUN=""
CS_PID=""
cleanup() {
  local status=$?
  if [ -n "$CS_PID" ] && kill -0 "$CS_PID" 2>/dev/null; then
    kill -TERM -- "-$CS_PID" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$CS_PID" 2>/dev/null || break; sleep 0.25; done
    kill -KILL -- "-$CS_PID" 2>/dev/null || true
  fi
  [ -n "$RUN" ] || { log "done (exit $status)"; exit "$status"; }
  cp "$RUN/code-server.log" "$ARTIFACTS/code-server.log" 2>/dev/null || true
  # The extension's output channel (server log included) as VS Code wrote it to disk.
  find "$RUN/user-data/logs" -name '*AccelOpt*.log' -exec cat {} + >"$ARTIFACTS/accelopt-output.log" 2>/dev/null || true
  grep -hoE '(Activated in [0-9.]+ ms( \([0-9.]+ ms more to load the bundle\))?|Server ready in [0-9.]+ ms)' \
    "$ARTIFACTS/accelopt-output.log" 2>/dev/null | head -2 \
    | sed 's/^/[e2e] extension: /' >&2 || true
  if [ "${ACCELOPT_E2E_KEEP:-0}" = 1 ]; then log "kept $RUN"; else rm -rf "$RUN"; fi
  log "done (exit $status)"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
RUN="$(mktemp -d "${TMPDIR:-/tmp}/accelopt-e2e.XXXXXX")"
WS="$RUN/workspace"
mkdir -p "$WS" "$RUN/user-data/User" "$RUN/user-data/Machine" "$RUN/extensions" "$RUN/xdg-config" "$RUN/xdg-data" "$RUN/xdg-cache"
{ echo '# accelopt: task=silu:small'; cat "$REPO/nkibench/kernels/silu.py"; } >"$WS/silu.py"
cat >"$RUN/user-data/User/settings.json" <<EOF
{
  "workbench.startupEditor": "none",
  "chat.disableAIFeatures": true,
  "telemetry.telemetryLevel": "off",
  "extensions.autoUpdate": false,
  "extensions.autoCheckUpdates": false,
  "security.workspace.trust.enabled": false,
  "workbench.tips.enabled": false,
  "editor.codeLens": true,
  "editor.hover.delay": 150,
  "editor.minimap.enabled": false,
  "files.autoSave": "off",
  "window.commandCenter": false,
  "workbench.secondarySideBar.defaultVisibility": "hidden",
  "accelopt.python": "$PYTHON",
  "accelopt.memory.dbPath": "$RUN/memory.sqlite",
  "accelopt.search.preset": "quick",
  "accelopt.trace.server": "$( [ "${ACCELOPT_E2E_TRACE:-0}" = 1 ] && echo verbose || echo off )"
}
EOF
# Machine-scoped settings (accelopt.python, accelopt.memory.dbPath) are read from the server side's
# Machine/settings.json in a remote window such as code-server's; user settings alone may be ignored.
cp "$RUN/user-data/User/settings.json" "$RUN/user-data/Machine/settings.json"
# A Python without accelopt, for the "package missing" message: the same interpreter with -S (no
# site-packages, so no accelopt, numpy or pygls).
printf '#!/bin/sh\nexec "%s" -S "$@"\n' "$PYTHON" >"$RUN/bare-python"
chmod +x "$RUN/bare-python"
export XDG_CONFIG_HOME="$RUN/xdg-config" XDG_DATA_HOME="$RUN/xdg-data" XDG_CACHE_HOME="$RUN/xdg-cache"
CS_ARGS=(--auth none --disable-telemetry --disable-update-check --disable-workspace-trust
         --user-data-dir "$RUN/user-data" --extensions-dir "$RUN/extensions")
PATH="$(dirname "$NODE24"):$PATH" "$CODE_SERVER" "${CS_ARGS[@]}" --install-extension "$VSIX" >"$RUN/install.log" 2>&1 \
  || { cat "$RUN/install.log" >&2; log "installing the .vsix failed"; exit 1; }

PORT="$("$NODE24" -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close();})')"
log "starting code-server on 127.0.0.1:$PORT"
PATH="$(dirname "$NODE24"):$PATH" setsid "$CODE_SERVER" "${CS_ARGS[@]}" --bind-addr "127.0.0.1:$PORT" \
  $( [ "${ACCELOPT_E2E_TRACE:-0}" = 1 ] && echo --log trace ) "$WS" \
  >"$RUN/code-server.log" 2>&1 &
CS_PID=$!


for _ in $(seq 1 120); do
  "$NODE24" -e 'fetch(process.argv[1]).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' \
    "http://127.0.0.1:$PORT/healthz" && break
  kill -0 "$CS_PID" 2>/dev/null || { cat "$RUN/code-server.log" >&2; log "code-server exited"; exit 1; }
  sleep 0.25
done

# 4. The browser checks.
log "running the browser checks"
E2E_URL="http://127.0.0.1:$PORT/?folder=$WS" E2E_WORKSPACE="$WS" E2E_ARTIFACTS="$ARTIFACTS" E2E_CHROMIUM="$CHROMIUM" \
  E2E_USER_DATA="$RUN/user-data" E2E_BARE_PYTHON="$RUN/bare-python" E2E_CODE_SERVER_PID="$CS_PID" "$NODE24" "$HERE/e2e.mjs"
