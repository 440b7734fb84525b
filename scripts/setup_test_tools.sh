#!/usr/bin/env bash
# What the player's tests need besides Python: Node (its pure parts run under node:test) and
# Debian's chromium driven by playwright-core from npm (no browser download).
set -euo pipefail
need_pkgs=()
command -v node >/dev/null || need_pkgs+=(nodejs npm)
[ -x /usr/bin/chromium ] || need_pkgs+=(chromium)
bash "$(dirname "$0")/apt_install.sh" "${need_pkgs[@]+"${need_pkgs[@]}"}"
npm ci --prefix tests/web --no-audit --no-fund --silent
echo "setup: test tools ready (node $(node --version), $(/usr/bin/chromium --version 2>/dev/null | head -1))"
