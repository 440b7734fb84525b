#!/usr/bin/env bash
# What the tests need besides Python: Node (the player's pure parts run under node:test), Debian's
# chromium driven by playwright-core from npm (no browser download), and Debian's HAProxy (the
# two-server benchmark through a load balancer, scripts/lb_bench.py).
set -euo pipefail
need_pkgs=()
command -v node >/dev/null || need_pkgs+=(nodejs npm)
[ -x /usr/bin/chromium ] || need_pkgs+=(chromium)
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || need_pkgs+=(haproxy)
bash "$(dirname "$0")/apt_install.sh" "${need_pkgs[@]+"${need_pkgs[@]}"}"
npm ci --prefix tests/web --no-audit --no-fund --silent
echo "setup: test tools ready (node $(node --version), $(/usr/bin/chromium --version 2>/dev/null | head -1), $(/usr/sbin/haproxy -v 2>/dev/null | head -1))"
