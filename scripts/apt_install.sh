#!/usr/bin/env bash
# Installs the given Debian packages (with sudo when not root), or says clearly how to.
# Usage: scripts/apt_install.sh PACKAGE...
set -euo pipefail
[ $# -gt 0 ] || exit 0
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo_cmd="sudo"
if ! { $sudo_cmd apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "$@"; } >/dev/null; then
  echo "setup: could not install $* with apt-get. Install it with your package manager (Debian/Ubuntu: apt-get install $*) and run again." >&2
  exit 1
fi
