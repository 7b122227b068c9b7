# bench/lua-env.sh: sourced by the GPU scripts (". bench/lua-env.sh") to
# put Lua 5.4 and busted on PATH: the system's when installed, else the
# Debian packages in .deps/ unpacked into /tmp/cupola-lua (the GPU machine
# has no Lua and no network).  bench/gpu-check.sh sources it too.  Exports PATH, LD_LIBRARY_PATH, LUA_PATH, LUA_CPATH, BUSTED and
# CUPOLA_NO_DEPS, and sets for builds LUA_INC, ZFLAGS, ZLD and MAKE_FLAGS: the
# variables gpu-check's build stage passes to make, so that a later
# `make TARGET $MAKE_FLAGS` reuses its objects instead of rebuilding.
ZFLAGS="" ZLD=""
if command -v lua5.4 >/dev/null 2>&1 && [ -f /usr/include/lua5.4/lua.h ]; then
    LUA_INC=/usr/include/lua5.4
else
    R=/tmp/cupola-lua
    if [ ! -x $R/usr/bin/lua5.4 ]; then
        for f in .deps/*.deb; do dpkg -x "$f" $R || return 1; done
    fi
    export PATH=$R/usr/bin:$PATH
    export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LUA_PATH="$R/usr/share/lua/5.4/?.lua;$R/usr/share/lua/5.4/?/init.lua;;"
    export LUA_CPATH="$R/usr/lib/x86_64-linux-gnu/lua/5.4/?.so;;"
    LUA_INC=$R/usr/include/lua5.4
    ZFLAGS="-I$R/usr/include -I$R/usr/include/x86_64-linux-gnu"
    ZLD="-L$R/usr/lib/x86_64-linux-gnu"
fi
export BUSTED="lua5.4 $(command -v busted)"
export CUPOLA_NO_DEPS=1
MAKE_FLAGS="LUA_INCDIR=$LUA_INC EXTRA_LDFLAGS=$ZLD"
MAKE_CFLAGS="-Werror $ZFLAGS"
