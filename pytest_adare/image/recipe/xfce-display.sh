#!/bin/sh
# LightDM's display-setup-script (root, DISPLAY and XAUTHORITY of the new X server): the
# image's screen size, and no key autorepeat (see desktop-session.sh; XFCE's own keyboard
# setting says the same, in keyboards.xml, so its settings daemon keeps it off).
. /adare/init/lib.sh
. /adare/init/agent.env
[ -n "$ADARE_DISPLAY" ] && xrandr -s "$ADARE_DISPLAY" > /dev/null 2>&1
xset r off
say "X started on $DISPLAY"
exit 0
