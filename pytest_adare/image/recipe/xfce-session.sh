#!/bin/sh
# LightDM's session-setup-script (root, just before the user's session starts): what the
# session has, written to /run/adare/session.env, where the agent and guest.user read it.
# Its runtime directory and session bus are logind's and systemd --user's (dbus-user-session).
. /adare/init/lib.sh
. /adare/init/agent.env
user="${USER:-$ADARE_USER}"
uid=$(id -u "$user")
home=$(getent passwd "$user" | cut -d: -f6)
mkdir -p /run/adare
cat > /run/adare/session.env.new <<ENV
USER=$user
LOGNAME=$user
HOME=$home
SHELL=$(getent passwd "$user" | cut -d: -f7)
LANG=C.UTF-8
DISPLAY=${DISPLAY:-:0}
XAUTHORITY=$home/.Xauthority
XDG_RUNTIME_DIR=/run/user/$uid
XDG_SESSION_TYPE=x11
XDG_CURRENT_DESKTOP=XFCE
XDG_SESSION_DESKTOP=xfce
DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/$uid/bus
PATH=/usr/local/bin:/usr/bin:/bin
ENV
mv /run/adare/session.env.new /run/adare/session.env
say "session of $user starting"
exit 0
