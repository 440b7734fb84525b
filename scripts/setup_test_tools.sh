#!/usr/bin/env bash
# What the player's tests need besides Python: Node (its pure parts run under node:test) and
# Debian's chromium driven by playwright-core from npm (no browser download).
set -euo pipefail
need_pkgs=()
command -v node >/dev/null || need_pkgs+=(nodejs npm)
[ -x /usr/bin/chromium ] || need_pkgs+=(chromium)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo_cmd="sudo"
  if ! { $sudo_cmd apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_pkgs[@]}"; } >/dev/null; then
    echo "setup: could not install ${need_pkgs[*]} with apt-get; install them (Debian: apt-get install ${need_pkgs[*]}) and run again." >&2
    exit 1
  fi
fi
npm ci --prefix tests/web --no-audit --no-fund --silent
echo "setup: test tools ready (node $(node --version), $(/usr/bin/chromium --version 2>/dev/null | head -1))"
