# bench/lua-env.sh: sourced by the GPU scripts (". bench/lua-env.sh") to
# put Lua 5.4 and busted on PATH: the system's when installed, else the
# Debian packages in .deps/ unpacked into /tmp/cupola-lua (the GPU machine
# has no Lua and no network; bench/gpu-check.sh's build stage unpacks them
# too).  Exports what gpu-check.sh exports, and LUA_INC for builds.
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
fi
export CUPOLA_NO_DEPS=1
