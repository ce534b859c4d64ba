# Sourced by the adare init scripts.
# say MESSAGE: one marker line on the console, with the guest's uptime.
say() {
    read -r up _ < /proc/uptime
    echo "adare-init: $* [${up}s]" > /dev/console
}

# install_private SRC DEST: copy SRC to DEST readable and writable by the owner only
# (DEST may hold a token that makes its reader root through the agent). A new file is
# written and renamed over DEST, so an existing DEST's wider mode is not kept.
install_private() {
    rm -f "$2.new"
    (umask 077 && cat "$1" > "$2.new") || return 1
    chmod 600 "$2.new" && mv -f "$2.new" "$2"
}
