#!/bin/sh
# Run in the image's root at build time: the desktop user "$1" (uid 1000) as a desktop
# installer makes it: a home with the XDG user directories and their user-dirs.dirs.
set -e
name="$1"
home="/home/$name"
grep -q "^$name:" /etc/group || echo "$name:x:1000:" >> /etc/group
grep -q "^$name:" /etc/passwd || echo "$name:x:1000:1000:Desktop user:$home:/bin/sh" >> /etc/passwd
grep -q "^$name:" /etc/shadow || echo "$name:*:19000:0:99999:7:::" >> /etc/shadow
# Devices the session opens (sound, GPU, input), as logind's seat ACLs would allow.
for group in audio video input render; do
    sed -i -e "/^$group:.*:\$/ s/\$/$name/" -e t -e "/^$group:/ s/\$/,$name/" /etc/group
done
for dir in Desktop Documents Downloads Music Pictures Public Templates Videos \
    .config .cache .local/share; do
    mkdir -p "$home/$dir"
done
cat > "$home/.config/user-dirs.dirs" <<'DIRS'
XDG_DESKTOP_DIR="$HOME/Desktop"
XDG_DOWNLOAD_DIR="$HOME/Downloads"
XDG_TEMPLATES_DIR="$HOME/Templates"
XDG_PUBLICSHARE_DIR="$HOME/Public"
XDG_DOCUMENTS_DIR="$HOME/Documents"
XDG_MUSIC_DIR="$HOME/Music"
XDG_PICTURES_DIR="$HOME/Pictures"
XDG_VIDEOS_DIR="$HOME/Videos"
DIRS
echo "en_US" > "$home/.config/user-dirs.locale"
chown -R 1000:1000 "$home"
chmod 750 "$home"
