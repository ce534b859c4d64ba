#!/bin/sh
# Respawned by busybox init: qemu-ga on the org.qemu.guest_agent.0 virtio port.
. /adare/init/lib.sh
port=/dev/virtio-ports/org.qemu.guest_agent.0
if [ ! -e "$port" ]; then
    # No QGA channel on this VM: look again later instead of spinning.
    sleep 30
    exit 0
fi
say "qemu-ga started"
exec /usr/sbin/qemu-ga --method=virtio-serial --path="$port"
