# Sourced by the adare init scripts.
# say MESSAGE: one marker line on the console, with the guest's uptime.
say() {
    read -r up _ < /proc/uptime
    echo "adare-init: $* [${up}s]" > /dev/console
}
