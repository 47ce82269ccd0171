#!/usr/bin/env bash
# Test hosts of the molecule/rke2 scenario: one root file system per host under BASE, built from bind mounts:
# the controller's /usr read-only (with a writable /usr/local per host, where RKE2 unpacks), a few device
# nodes, and a small writable /etc, /var, /run, /tmp of the host's own. Nothing is installed on the controller.
#
#   roots.sh create  BASE NAME...   build (or complete) the roots; safe to run again
#   roots.sh destroy BASE NAME...   unmount everything under each root, check that nothing is left, remove it
set -euo pipefail

action=${1:?usage: roots.sh create|destroy BASE NAME...}
base=${2:?usage: roots.sh create|destroy BASE NAME...}
shift 2
[ "$(id -u)" = 0 ] || { echo "roots.sh: needs root (bind mounts, chroot)" >&2; exit 1; }
base=$(realpath -m "$base")

# Mount points at or under $1, deepest first (field 5 of mountinfo).
mounts_under() {
    awk -v root="$1" '$5 == root || index($5, root "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r
}

bind() {  # bind SRC DEST [ro]: a private bind mount, so nothing mounted below it propagates to SRC
    local src=$1 dest=$2 mode=${3:-rw}
    mountpoint -q "$dest" && return 0
    mount --bind "$src" "$dest"
    mount --make-private "$dest"
    if [ "$mode" = ro ]; then mount -o remount,bind,ro "$dest"; fi
}

create() {
    local root=$base/roots/$1 local_usr=$base/usr-local/$1
    mkdir -p "$root" "$local_usr"
    # The root itself is a private mount: the mounts inside it stay invisible to the controller's namespace peers.
    bind "$root" "$root"
    mkdir -p "$root"/{etc,var/tmp,run,tmp,root,home,usr,dev,proc}
    chmod 1777 "$root/tmp" "$root/var/tmp"
    for dir in bin sbin lib lib32 lib64 libx32; do
        if [ -L "/$dir" ]; then
            ln -sfn "$(readlink "/$dir")" "$root/$dir"
        elif [ -d "/$dir" ]; then
            mkdir -p "$root/$dir"
            bind "/$dir" "$root/$dir" ro
        fi
    done
    bind /usr "$root/usr" ro
    bind "$local_usr" "$root/usr/local"
    for node in null zero random urandom; do
        [ -e "$root/dev/$node" ] || touch "$root/dev/$node"
        bind "/dev/$node" "$root/dev/$node"
    done
    # What Python, the shell and Ansible's modules read from /etc; symlinks stay symlinks (os-release -> /usr).
    for entry in passwd group shadow hosts nsswitch.conf ld.so.cache ld.so.conf ld.so.conf.d alternatives \
                 os-release localtime mime.types; do
        if [ -e "/etc/$entry" ] || [ -L "/etc/$entry" ]; then
            [ -e "$root/etc/$entry" ] || cp -a "/etc/$entry" "$root/etc/$entry"
        fi
    done
    echo "$1" > "$root/etc/hostname"
}

destroy() {
    local root=$base/roots/$1 local_usr=$base/usr-local/$1 left
    if [ -d "$root" ]; then
        while read -r mount_point; do
            [ -n "$mount_point" ] && umount "$mount_point"
        done < <(mounts_under "$root")
        left=$(mounts_under "$root")
        if [ -n "$left" ]; then
            echo "roots.sh: still mounted under $root, not removing it: $left" >&2
            exit 1
        fi
        rm -rf --one-file-system "$root"
    fi
    rm -rf --one-file-system "$local_usr"
}

for name in "$@"; do
    case $action in
        create) create "$name" ;;
        destroy) destroy "$name" ;;
        *) echo "roots.sh: unknown action $action" >&2; exit 2 ;;
    esac
done
if [ "$action" = destroy ]; then
    rmdir "$base/roots" "$base/usr-local" 2>/dev/null || true
fi
