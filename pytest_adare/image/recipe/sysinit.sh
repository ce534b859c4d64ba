#!/bin/sh
# Run once by busybox init (or the adare-sysinit unit): mounts, network, QGA port names,
# the fw_cfg hand-off.
. /adare/init/lib.sh
# /adare/bin holds busybox's applets (mount, ps, ...); the minimal Debian lacks some.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:/adare/bin
# Under systemd (a unit runs this script there) all of it is done already.
if [ ! -d /run/systemd/system ]; then
    mountpoint -q /proc || mount -t proc proc /proc
    mountpoint -q /sys || mount -t sysfs sysfs /sys
    mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
    mkdir -p /dev/pts /dev/shm
    mount -t devpts -o gid=5,mode=620 devpts /dev/pts
    mount -t tmpfs -o mode=1777 tmpfs /dev/shm
    mount -t tmpfs -o mode=755 tmpfs /run
    mount -t tmpfs -o mode=1777 tmpfs /tmp
    ln -sf /proc/self/fd /dev/fd
    hostname -F /etc/hostname
fi

# QEMU user networking: the guest is always 10.0.2.15, gateway and DNS at .2/.3.
ip link set lo up
if ip link set eth0 up 2>/dev/null; then
    ip addr add 10.0.2.15/24 dev eth0
    ip route add default via 10.0.2.2
    echo "nameserver 10.0.2.3" > /run/resolv.conf
    say "network up (10.0.2.15)"
fi

# What udev would do: /dev/virtio-ports/<name> for every virtio-serial port.
mkdir -p /dev/virtio-ports
for port in /sys/class/virtio-ports/*; do
    [ -r "$port/name" ] || continue
    ln -sf "../${port##*/}" "/dev/virtio-ports/$(cat "$port/name")"
done

# Per-VM settings and an optional newer agent, handed over by the host via fw_cfg.
mkdir -p /adare/run
fw_cfg=/sys/firmware/qemu_fw_cfg/by_name/opt/adare
if [ -r "$fw_cfg/config.json/raw" ]; then
    install_private "$fw_cfg/config.json/raw" /adare/run/config.json
    say "config.json from fw_cfg"
fi
if [ -r "$fw_cfg/bundle.pyz/raw" ]; then
    cat "$fw_cfg/bundle.pyz/raw" > /adare/agent/bundle.pyz.new
    mv /adare/agent/bundle.pyz.new /adare/agent/bundle.pyz
    say "agent bundle from fw_cfg"
fi
[ -x /adare/init/sysinit-extra.sh ] && /adare/init/sysinit-extra.sh
say "system ready"
