#!/bin/sh
# /sbin/shutdown for a busybox-init guest (qemu-ga's guest-shutdown calls it).
action=poweroff
for arg in "$@"; do
    case "$arg" in
        -r) action=reboot ;;
        -H) action=halt ;;
        -P|-h) action=poweroff ;;
    esac
done
exec /bin/busybox "$action"
