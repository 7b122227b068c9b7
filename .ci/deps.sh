#!/bin/sh
# Installs what cupola needs from Debian's packages, only what is missing
# (idempotent: a second run installs nothing and does not touch the network).
set -eu
need=""
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_file() { [ -e "$1" ]; }

have_cmd lua5.4                                  || need="$need lua5.4"
have_file /usr/include/lua5.4/lua.h              || need="$need liblua5.4-dev"
have_file /usr/share/lua/5.4/busted/runner.lua   || need="$need lua-busted"
have_file /usr/share/lua/5.4/dkjson.lua          || need="$need lua-dkjson"
have_file /usr/include/zlib.h                    || need="$need zlib1g-dev"
have_cmd pkg-config                              || need="$need pkg-config"
have_cmd luarocks                                || need="$need luarocks"   # spec/install_spec.lua
have_cmd gcc                                     || need="$need gcc"
have_cmd make                                    || need="$need make"

[ -z "$need" ] && exit 0
echo "make deps: installing$need"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $need >/dev/null
