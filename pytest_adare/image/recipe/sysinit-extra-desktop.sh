#!/bin/sh
# Desktop image: udev makes /dev/dri and /dev/input and loads their drivers.
. /adare/init/lib.sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:/adare/bin
modprobe bochs 2>/dev/null
/lib/systemd/systemd-udevd --daemon
udevadm trigger --action=add --type=subsystems
udevadm trigger --action=add --type=devices
udevadm settle --timeout=30
say "udev settled"
