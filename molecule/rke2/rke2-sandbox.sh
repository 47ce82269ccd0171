#!/usr/bin/env bash
# Runs the real `rke2 server|agent` of a test host in a sandbox, far enough to show what it checks at start
# (its profile checks among them), without changing the controller: new mount, network, PID, IPC and UTS
# namespaces; only lo, holding the node's address; a scratch root of plain copies and read-only bind mounts;
# /proc/sys, sysfs and the cgroups read-only; no CAP_SYS_MODULE (so no kernel module is loaded) and none of
# its friends. Every mount lives in the sandbox's own mount namespace and goes with it; what RKE2 writes
# lands in the scratch root, which is removed after. Its output goes to stdout.
#
#   rke2-sandbox.sh HOST_ROOT USERS_FROM KERNEL_VALUES NODE_TYPE
#
# HOST_ROOT      the test host's root: its /usr/local (the installed release) and /etc/rancher/rke2
# USERS_FROM     the root whose /etc/passwd and /etc/group the sandbox has (the host's, or one without the
#                role's host work)
# KERNEL_VALUES  a sysctl.d file (key=value lines): the values the sandbox's /proc/sys shows for those keys,
#                which is the kernel after `sysctl -p` of that file; the sandbox writes nothing to the
#                controller's kernel
# NODE_TYPE      server or agent
#
# RKE2 stops by itself at the first check it fails or, past them all, when it cannot fetch its runtime image
# (there is no network); the sandbox's PID namespace ends every process it started. RKE2_SANDBOX_LIMIT (600 s)
# only keeps a changed RKE2 that would wait forever from hanging the scenario; nothing is judged by time.
set -euo pipefail

usage="usage: rke2-sandbox.sh HOST_ROOT USERS_FROM KERNEL_VALUES server|agent"
host_root=$(realpath "${1:?$usage}")
users_from=$(realpath "${2:?$usage}")
kernel_values=$(realpath "${3:?$usage}")
node_type=${4:?$usage}
[ "$node_type" = server ] || [ "$node_type" = agent ] || { echo "$usage" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "rke2-sandbox.sh: needs root (namespaces, mounts, chroot)" >&2; exit 1; }
[ -x "$host_root/usr/local/bin/rke2" ] || { echo "rke2-sandbox.sh: no $host_root/usr/local/bin/rke2" >&2; exit 1; }

scratch=$(mktemp -d "${TMPDIR:-/tmp}/rke2-sandbox.XXXXXX")
trap 'rm -rf --one-file-system "$scratch"' EXIT

inside() {
    local root=$scratch/root values=$scratch/values
    mkdir -p "$root"/{etc/rancher,usr,dev,proc,sys,run,tmp,var/tmp,root} "$values"
    chmod 1777 "$root/tmp" "$root/var/tmp"
    ro() { mount --bind "$1" "$2"; mount -o remount,bind,ro "$2"; }
    for dir in bin sbin lib lib32 lib64 libx32; do
        if [ -L "/$dir" ]; then
            ln -sfn "$(readlink "/$dir")" "$root/$dir"
        elif [ -d "/$dir" ]; then
            mkdir -p "$root/$dir"
            ro "/$dir" "$root/$dir"
        fi
    done
    ro /usr "$root/usr"
    ro "$host_root/usr/local" "$root/usr/local"
    for node in null zero random urandom; do
        touch "$root/dev/$node"
        mount --bind "/dev/$node" "$root/dev/$node"
    done
    cp -a "$host_root/etc/rancher/rke2" "$root/etc/rancher/rke2"
    for entry in passwd group; do cp "$users_from/etc/$entry" "$root/etc/$entry"; done
    for entry in hosts nsswitch.conf; do [ -e "/etc/$entry" ] && cp -L "/etc/$entry" "$root/etc/$entry"; done
    echo "rke2-sandbox" > "$root/etc/hostname"

    # The PID namespace's own /proc, its /proc/sys read-only, and the given kernel values over it.
    mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
    ro "$root/proc/sys" "$root/proc/sys"
    local key value file
    while IFS='=' read -r key value; do
        key=$(echo "$key" | tr -d '[:space:]'); value=$(echo "$value" | tr -d '[:space:]')
        case $key in ''|'#'*|';'*) continue ;; esac
        file=$values/$key
        printf '%s\n' "$value" > "$file"
        mount --bind "$file" "$root/proc/sys/${key//./\/}"
    done < "$kernel_values"
    mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$root/sys"
    if mountpoint -q /sys/fs/cgroup; then
        mount --rbind /sys/fs/cgroup "$root/sys/fs/cgroup"
        awk -v top="$root/sys/fs/cgroup" '$5 == top || index($5, top "/") == 1 { print $5 }' /proc/self/mountinfo |
            while read -r mount_point; do mount -o remount,bind,ro "$mount_point"; done
    fi

    ip link set lo up
    local node_ip
    node_ip=$(sed -n 's/^node-ip: *//p' "$root/etc/rancher/rke2/config.yaml" | tr -d "\"'")
    [ -n "$node_ip" ] && ip addr add "$node_ip/32" dev lo

    exec setpriv --bounding-set=-sys_module,-sys_rawio,-sys_boot,-sys_time,-syslog,-mac_admin,-mac_override,-wake_alarm,-block_suspend \
        --inh-caps=-all timeout --kill-after=10 "${RKE2_SANDBOX_LIMIT:-600}" \
        chroot "$root" /usr/local/bin/rke2 "$node_type" --config /etc/rancher/rke2/config.yaml 2>&1
}

export -f inside
export host_root users_from kernel_values node_type scratch
# The caller judges RKE2's output; its exit status is the last line.
rc=0
unshare --mount --propagation private --net --pid --fork --ipc --uts bash -c inside || rc=$?
echo "rke2-sandbox.sh: rke2 $node_type exited with rc $rc"
