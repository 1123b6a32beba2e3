#!/usr/bin/env bash
# Headless Chromium for the browser test and `qeval report --pdf`: Debian's `chromium` package, installed
# once (about 20 s and 410 MB here); nothing happens when a `chromium` is already on the PATH.
set -euo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
fail() { echo "make browser: $1; install Debian's chromium package by hand (apt-get install chromium)" >&2; exit 1; }
command -v apt-get >/dev/null 2>&1 || fail "no apt-get on this machine"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo -n true 2>/dev/null || fail "not root and no password-less sudo"
  sudo="sudo -n"
fi
echo "make browser: installing chromium with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q >/dev/null || fail "apt-get update failed"
$sudo apt-get install -y -q --no-install-recommends chromium >/dev/null || fail "apt-get install chromium failed"
command -v chromium >/dev/null 2>&1 || fail "chromium is still not on the PATH after apt-get"
chromium --version 2>/dev/null | head -1 >&2
