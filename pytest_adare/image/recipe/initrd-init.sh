#!/bin/busybox sh
# PID 1 of the adare initrd: load the virtio drivers, mount the root disk, hand over.
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /newroot
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for module in $(cat /modules/order); do
    insmod "/modules/$module.ko" || echo "adare-initrd: could not load $module"
done
root=/dev/vda
init=/sbin/init
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        root=/dev/*) root="${arg#root=}" ;;
        init=*) init="${arg#init=}" ;;
    esac
done
tries=0
while [ ! -b "$root" ] && [ "$tries" -lt 100 ]; do
    usleep 50000
    tries=$((tries + 1))
done
if ! mount -t ext4 -o rw "$root" /newroot; then
    echo "adare-initrd: cannot mount the root disk $root; dropping to a shell"
    exec sh
fi
# Per-VM files the host appended to this initrd (fast: the firmware loads it by DMA).
if [ -f /handoff/config.json ]; then
    mkdir -p /newroot/adare/run
    # Owner-only (it holds the agent's token): a new file, renamed over any old one.
    rm -f /newroot/adare/run/config.json.new
    (umask 077 && cat /handoff/config.json > /newroot/adare/run/config.json.new)
    chmod 600 /newroot/adare/run/config.json.new
    mv -f /newroot/adare/run/config.json.new /newroot/adare/run/config.json
    echo "adare-initrd: config.json from the initrd"
fi
if [ -f /handoff/bundle.pyz ]; then
    cp /handoff/bundle.pyz /newroot/adare/agent/bundle.pyz
    echo "adare-initrd: agent bundle from the initrd"
fi
umount /proc /sys
mount --move /dev /newroot/dev
echo "adare-initrd: root $root mounted, starting $init"
exec switch_root /newroot "$init"
