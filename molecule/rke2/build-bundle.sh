#!/usr/bin/env bash
# An RKE2 air-gap artifact folder made of stubs, shaped like a release's assets:
#   rke2.linux-amd64.tar.gz       bin/rke2 (a stub that answers --version and refuses to run, or the real
#                                 binary when REAL_RKE2 names one), the killall and uninstall scripts,
#                                 lib/systemd/system/rke2-{server,agent}.service and .env,
#                                 share/rke2/rke2-cis-sysctl.conf as the release ships it
#   rke2-images*.linux-amd64.tar.zst / .txt   stub image archives and their image lists
#   sha256sum-amd64.txt           the checksums of all of them, as the release publishes them
#
#   build-bundle.sh DIR VERSION [good|corrupt] [REAL_RKE2]
# With "corrupt", the tarball is damaged after the checksums are written: the checksum failure path.
# ARCH=arm64 builds the arm64 files (rke2.linux-arm64.tar.gz, sha256sum-arm64.txt, ...) into DIR beside the
# others, as a real air-gap folder for a mixed fleet holds both; the stub says its architecture in --version.
set -euo pipefail

dir=${1:?usage: build-bundle.sh DIR VERSION [good|corrupt] [REAL_RKE2]}
version=${2:?usage: build-bundle.sh DIR VERSION [good|corrupt] [REAL_RKE2]}
mode=${3:-good}
arch=${ARCH:-amd64}
real_rke2=${4:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$dir" "$work/bin" "$work/lib/systemd/system" "$work/share/rke2"

cat > "$work/bin/rke2" <<STUB
#!/bin/sh
# STUB: not RKE2. Built by molecule/rke2/build-bundle.sh so that the rke2 role can be tested without the release.
case "\$1" in
    --version|-v)
        echo "rke2 version $version (stub linux-$arch: not RKE2, built by molecule/rke2)"
        echo "go version none (stub)"
        ;;
    *)
        echo "rke2 $version stub: this is a test stub built by molecule/rke2, not RKE2; it runs nothing" >&2
        exit 1
        ;;
esac
STUB
for script in rke2-killall.sh rke2-uninstall.sh; do
    printf '#!/bin/sh\necho "%s: stub built by molecule/rke2, not part of RKE2" >&2\nexit 1\n' "$script" > "$work/bin/$script"
done
if [ -n "$real_rke2" ]; then
    # Read the whole answer first: grep -q would stop reading after the first line, and under pipefail the
    # binary's SIGPIPE on its second line ("go version ...") fails the check at random.
    real_version=$("$real_rke2" --version)
    case $real_version in
        "rke2 version $version "*) ;;
        *) echo "build-bundle.sh: $real_rke2 is not rke2 $version (it says: ${real_version%%$'\n'*})" >&2; exit 1 ;;
    esac
    cp "$real_rke2" "$work/bin/rke2"
fi
chmod 0755 "$work"/bin/*

# The units follow the release's bundle/lib/systemd/system files.
for type in server agent; do
    conflicts=agent
    [ "$type" = agent ] && conflicts=server
    cat > "$work/lib/systemd/system/rke2-$type.service" <<UNIT
[Unit]
Description=Rancher Kubernetes Engine v2 ($type)
Documentation=https://github.com/rancher/rke2#readme
Wants=network-online.target
After=network-online.target
Conflicts=rke2-$conflicts.service

[Install]
WantedBy=multi-user.target

[Service]
Type=notify
EnvironmentFile=-/etc/default/%N
EnvironmentFile=-/etc/sysconfig/%N
EnvironmentFile=-/usr/local/lib/systemd/system/%N.env
KillMode=process
Delegate=yes
LimitNOFILE=1048576
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
TimeoutStartSec=0
Restart=always
RestartSec=5s
ExecStartPre=/bin/sh -xc '! /usr/bin/systemctl is-enabled --quiet nm-cloud-setup.service'
ExecStartPre=-/sbin/modprobe br_netfilter
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/local/bin/rke2 $type
ExecStopPost=-/bin/sh -c "systemd-cgls /system.slice/%n | grep -Eo '[0-9]+ (containerd|kubelet)' | awk '{print \$1}' | xargs -r kill"
UNIT
    printf 'HOME=/root\n' > "$work/lib/systemd/system/rke2-$type.env"
done
printf 'Stub license file of the molecule/rke2 test bundle (%s).\n' "$version" > "$work/share/rke2/LICENSE.txt"
# The kernel parameters the CIS profile needs, as the release's bundle/share/rke2/rke2-cis-sysctl.conf has them.
printf 'vm.panic_on_oom=0\nvm.overcommit_memory=1\nkernel.panic=10\nkernel.panic_on_oops=1\n' \
    > "$work/share/rke2/rke2-cis-sysctl.conf"
chmod 0644 "$work"/lib/systemd/system/* "$work"/share/rke2/*

cd "$dir"
# gzip -1: the real binary is 150 MB, and the scenario unpacks it on every host.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work" -cf - bin lib share | gzip -1 -n \
    > rke2.linux-$arch.tar.gz
for images in rke2-images rke2-images-core rke2-images-canal rke2-images-cilium; do
    printf 'stub image archive %s of %s, built by molecule/rke2 (not container images)\n' "$images" "$version" \
        > "$images.linux-$arch.tar.zst"
    printf 'docker.io/rancher/stub-%s:%s\n' "$images" "$version" > "$images.linux-$arch.txt"
done
sha256sum rke2.linux-$arch.tar.gz rke2-images*.linux-$arch.tar.zst rke2-images*.linux-$arch.txt > sha256sum-$arch.txt
if [ "$mode" = corrupt ]; then
    # One flipped byte in the middle of the tarball: what a truncated or damaged copy looks like.
    size=$(stat -c %s rke2.linux-$arch.tar.gz)
    printf '\xff' | dd of=rke2.linux-$arch.tar.gz bs=1 seek=$((size / 2)) conv=notrunc status=none
fi
