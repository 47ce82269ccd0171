#!/bin/sh
# journalctl --unit UNIT --lines N ... for the molecule/rke2 test hosts: the last N lines fake-systemctl.sh wrote.
set -eu
unit= lines=10
while [ $# -gt 0 ]; do
    case $1 in
        --unit) unit=$2; shift ;;
        --lines) lines=$2; shift ;;
    esac
    shift
done
tail -n "$lines" "/run/molecule-systemd/$unit.journal" 2>/dev/null || true
