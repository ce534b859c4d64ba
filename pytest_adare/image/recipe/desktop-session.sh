#!/bin/sh
# Respawned by busybox init: X on the VM's display, and the desktop user's session:
# openbox and a focused xterm.
. /adare/init/lib.sh
. /adare/init/agent.env
say "starting X on :0"
# No screen saver or DPMS: a blank screen would break screenshots in long tests.
Xorg :0 vt7 -nolisten tcp -s 0 -dpms -noreset > /adare/run/xorg.out 2>&1 &
xorg=$!
tries=0
while [ ! -S /tmp/.X11-unix/X0 ] && [ "$tries" -lt 300 ]; do
    sleep 0.1
    tries=$((tries + 1))
done
if [ ! -S /tmp/.X11-unix/X0 ]; then
    say "X did not start; see /adare/run/xorg.out"
    kill "$xorg"
    sleep 5
    exit 1
fi
[ -n "$ADARE_DISPLAY" ] && xrandr -s "$ADARE_DISPLAY" > /dev/null 2>&1
# No key autorepeat: input comes from XTest (the agent) or QMP (the host), each a key-down
# and a key-up; on a loaded TCG guest the key-up can come later than X's repeat delay,
# and the key was typed twice. `xset r on` in a test brings it back.
DISPLAY=:0 xset r off
# X adds the input devices udev knows a moment after it starts; keys typed before
# that are lost, so "desktop started" waits until every evdev device is in X.
tries=0
while [ "$tries" -lt 300 ]; do
    devices=$(ls /dev/input/ | grep -c '^event')
    added=$(grep -c 'config/udev: Adding input device .*(/dev/input/event' /var/log/Xorg.0.log)
    [ "$added" -ge "$devices" ] && break
    sleep 0.1
    tries=$((tries + 1))
done
# The session is the desktop user's (root has none), with what a display manager and
# logind give it: XDG_RUNTIME_DIR, a session bus there, a UTF-8 locale. What it has is
# written to /run/adare/session.env, where the agent and guest.user read it.
user="$ADARE_USER"
uid=$(id -u "$user")
runtime="/run/user/$uid"
mkdir -p "$runtime" /run/adare
chown "$user:$user" "$runtime"
chmod 700 "$runtime"
home=$(getent passwd "$user" | cut -d: -f6)
cat > /run/adare/session.env.new <<ENV
USER=$user
LOGNAME=$user
HOME=$home
SHELL=/bin/sh
LANG=C.UTF-8
DISPLAY=:0
XDG_RUNTIME_DIR=$runtime
XDG_SESSION_TYPE=x11
XDG_CURRENT_DESKTOP=openbox
DBUS_SESSION_BUS_ADDRESS=unix:path=$runtime/bus
PATH=/usr/local/bin:/usr/bin:/bin
ENV
mv /run/adare/session.env.new /run/adare/session.env
cd "$home" || cd /
# openbox runs --startup once it manages the screen, so the new xterm gets the focus.
# shellcheck disable=SC2046
setpriv --reuid="$uid" --regid="$uid" --init-groups env -i $(cat /run/adare/session.env) \
    sh -c 'dbus-daemon --session --address="$DBUS_SESSION_BUS_ADDRESS" --fork --nopidfile \
           && exec openbox --startup "xterm -geometry 100x30+40+40"' \
    > /adare/run/openbox.out 2>&1 &
say "desktop started"
wait "$xorg"
say "X exited; restarting"
