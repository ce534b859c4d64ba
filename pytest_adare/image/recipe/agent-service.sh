#!/bin/sh
# Respawned by busybox init: the adare agent on its WebSocket port and serial link.
. /adare/init/lib.sh
. /adare/init/agent.env
say "agent started"
# shellcheck disable=SC2086
python3 $ADARE_PYTHON_FLAGS /adare/agent/bundle.pyz /adare/run --serial "$ADARE_SERIAL" \
    > /adare/run/agent.out 2>&1
status=$?
say "agent exited with status $status; restarting"
tail -n 5 /adare/run/agent.out > /dev/console
sleep 2
