#!/usr/bin/env bash
# Installs the given Debian packages (with sudo when not root), or says clearly how to. Waits up to
# 10 minutes for another apt or dpkg run (an unattended upgrade, say) to let go of its lock.
# Usage: scripts/apt_install.sh PACKAGE...
set -euo pipefail
[ $# -gt 0 ] || exit 0
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo_cmd="sudo"
wait_lock=(-o DPkg::Lock::Timeout=600)
echo "setup: installing $* with apt-get"
if ! { $sudo_cmd apt-get "${wait_lock[@]}" update -qq &&
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get "${wait_lock[@]}" install -y -qq "$@"; } >/dev/null; then
  echo "setup: could not install $* with apt-get. Install it with your package manager (Debian/Ubuntu: apt-get install $*) and run again." >&2
  exit 1
fi
