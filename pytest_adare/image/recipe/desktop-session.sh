#!/bin/sh
# Respawned by busybox init: X on the VM's display, openbox, and a focused xterm.
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
# openbox runs --startup once it manages the screen, so the new xterm gets the focus.
openbox --startup "xterm -geometry 100x30+40+40" > /adare/run/openbox.out 2>&1 &
say "desktop started"
wait "$xorg"
say "X exited; restarting"
