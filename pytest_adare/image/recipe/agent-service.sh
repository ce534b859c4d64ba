#!/bin/sh
# Respawned by busybox init: the adare agent on its WebSocket port and serial link.
. /adare/init/lib.sh
. /adare/init/agent.env
serial="$ADARE_SERIAL"
# A QEMU started by hand without the agent's virtio-serial port: the UART still works.
[ -e "$serial" ] || serial=/dev/ttyS1
say "agent started"
# shellcheck disable=SC2086
python3 $ADARE_PYTHON_FLAGS /adare/agent/bundle.pyz /adare/run --serial "$serial" \
    > /adare/run/agent.out 2>&1
status=$?
say "agent exited with status $status; restarting"
tail -n 5 /adare/run/agent.out > /dev/console
sleep 2
