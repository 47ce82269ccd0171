#!/usr/bin/env bash
# Builds the lab's binaries from the Go module proxy into a cache folder outside
# the repository, keyed by a hash of the pins, so they are rebuilt only when a pin
# changes. Prints the bin folder on its last line of stdout.
#
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl  k8s.io/kubernetes (gobuild/go.mod)
#   etcd                                                             go.etcd.io/etcd/server/v3 (gobuild/cmd/etcd)
#   kwok                                                             sigs.k8s.io/kwok (KWOK_VERSION below)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
K8S_VERSION=v1.34.4      # keep equal to k8s.io/kubernetes in gobuild/go.mod
KWOK_VERSION=v0.8.0
cache_root=${GPUPLATFORM_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuplatform-rke2-lab}

# The cache key is the pins alone (module files, versions, the Go toolchain, build flags
# version), so editing this script's messages does not trigger a rebuild.
BUILD_RECIPE=1   # bump when the go build flags below change
pin_hash=$( (cat "$here/gobuild/go.mod" "$here/gobuild/go.sum" "$here/gobuild/cmd/etcd/main.go";
             echo "$K8S_VERSION $KWOK_VERSION $BUILD_RECIPE"; go env GOVERSION) | sha256sum | cut -c1-16)
bin="$cache_root/$pin_hash/bin"
mkdir -p "$bin"

log() { printf '[lab-build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

k8s_ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} \
 -X k8s.io/component-base/version.gitMajor=$(echo ${K8S_VERSION#v} | cut -d. -f1) \
 -X k8s.io/component-base/version.gitMinor=$(echo ${K8S_VERSION#v} | cut -d. -f2) \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION} \
 -X k8s.io/client-go/pkg/version.gitMajor=$(echo ${K8S_VERSION#v} | cut -d. -f1) \
 -X k8s.io/client-go/pkg/version.gitMinor=$(echo ${K8S_VERSION#v} | cut -d. -f2)"

export CGO_ENABLED=0 GOFLAGS=-mod=mod
total=6; n=0
build_one() { # name, package, dir, ldflags
  local name=$1 pkg=$2 dir=$3 ldflags=$4
  n=$((n + 1))
  if [ -x "$bin/$name" ]; then log "($n/$total) $name: cached"; return; fi
  log "($n/$total) $name: building $pkg (cold builds take minutes on 2 cores) ..."
  local start=$SECONDS
  (cd "$dir" && go build -trimpath -tags selinux,notest -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg")
  mv "$bin/$name.tmp" "$bin/$name"
  log "($n/$total) $name: built in $((SECONDS - start))s"
}

started=$SECONDS
log "pins: kubernetes ${K8S_VERSION}, etcd (gobuild/go.mod), kwok ${KWOK_VERSION}; cache $bin"
build_one kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$here/gobuild" "$k8s_ldflags"
build_one kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$here/gobuild" "$k8s_ldflags"
build_one kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$here/gobuild" "$k8s_ldflags"
build_one kubectl k8s.io/kubernetes/cmd/kubectl "$here/gobuild" "$k8s_ldflags"
build_one etcd ./cmd/etcd "$here/gobuild" "-s -w"
n=$((n + 1))
if [ -x "$bin/kwok" ]; then
  log "($n/$total) kwok: cached"
else
  log "($n/$total) kwok: go install sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION} ..."
  start=$SECONDS
  GOFLAGS= GOBIN="$bin" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
  log "($n/$total) kwok: built in $((SECONDS - start))s"
fi
log "all binaries ready in $((SECONDS - started))s"
echo "$bin"
