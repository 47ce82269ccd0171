#!/bin/sh
# A systemctl for the molecule/rke2 test hosts, which have no systemd: enough of it for the rke2 role's service
# tasks (ansible.builtin.systemd_service's show / is-enabled / enable / daemon-reload, and the role's show, is-active,
# start, restart). State in /run/molecule-systemd/<unit>.*: enabled, active, pid; <unit>.calls lists each start and restart;
# with <unit>.hang, start blocks as RKE2's Type=notify unit does while it cannot reach :9345, after writing that
# file's line to the journal (fake-journalctl.sh reads <unit>.journal).
set -eu
state=/run/molecule-systemd
mkdir -p "$state"
action=$1
shift
unit=
for arg in "$@"; do
    case $arg in -*) ;; *) unit=$(printf '%s' "$arg" | tr -d "'" | sed 's/\.service$//') ;; esac
done
case $action in
    daemon-reload) ;;
    is-enabled)
        if [ -e "$state/$unit.enabled" ]; then echo enabled; else echo disabled; exit 1; fi ;;
    enable) touch "$state/$unit.enabled" ;;
    is-active)
        if [ -e "$state/$unit.active" ]; then echo active; else echo inactive; exit 3; fi ;;
    show)
        active=inactive pid=0
        if [ -e "$state/$unit.active" ]; then active=active pid=$(cat "$state/$unit.pid"); fi
        enabled=disabled
        [ -e "$state/$unit.enabled" ] && enabled=enabled
        printf 'Id=%s.service\nLoadState=loaded\nActiveState=%s\nSubState=running\nMainPID=%s\nUnitFileState=%s\n' \
            "$unit" "$active" "$pid" "$enabled" ;;
    start|restart)
        echo "$action" >> "$state/$unit.calls"
        echo "Starting Rancher Kubernetes Engine v2 (${unit#rke2-})" >> "$state/$unit.journal"
        if [ -e "$state/$unit.hang" ]; then
            cat "$state/$unit.hang" >> "$state/$unit.journal"
            exec sleep 3600
        fi
        # The started process runs the installed binary: /proc/4343/exe, which the test links to it.
        echo 4343 > "$state/$unit.pid"
        touch "$state/$unit.active" ;;
    *) echo "fake systemctl: $action is not faked" >&2; exit 1 ;;
esac
