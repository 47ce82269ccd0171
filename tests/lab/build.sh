#!/usr/bin/env bash
# Builds the lab's binaries into a cache folder outside the repository, each group keyed
# by a hash of its pins, so a group is rebuilt only when one of its pins changes.
#
#   build.sh control-plane   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
#                            (k8s.io/kubernetes, gobuild/go.mod), etcd (gobuild/cmd/etcd),
#                            kwok (sigs.k8s.io/kwok)             -> prints the bin folder
#   build.sh helm-tools [v3] helm v4 (helm.sh/helm/v4: the install Jobs' default line, and what the lab
#                            packages its chart repository with) and helm-controller (github.com/k3s-io/
#                            helm-controller) in the bin folder; with v3 also helm v3 (helm.sh/helm/v3) in
#                            its v3/ folder, built only for a lab that runs it. From the Go module proxy
#                            -> prints the bin folder
#   build.sh gpu-operator SRC KEY VERSION
#                            the GPU Operator from its source tree SRC (go build -mod=vendor,
#                            offline), cached under KEY (tests/lab/upstream.py resolves the
#                            source and computes the key) -> prints the binary's path
#   build.sh rke2 SRC KEY    rke2 from its source tree SRC (modules from the Go module proxy),
#                            with the release's tags and ldflags (scripts/build-binary at the
#                            tag), cached under KEY (tests/lab/upstream.py) -> prints its path
#
# Progress goes to stderr, one line per binary; the result is the last line of stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
K8S_VERSION=v1.34.4      # keep equal to k8s.io/kubernetes in gobuild/go.mod
KWOK_VERSION=v0.8.0
# The helm inside helm-controller's install Job is klipper-helm's: RKE2 v1.34.1 (the lab's rke2) ships klipper-helm
# v0.9.8-build20250709, whose Dockerfile fetches helm v3.18.4; klipper-helm moved to helm v4 on 2026-06-01 (3776724,
# "Bump helm and plugins to v4") and builds v4.1.4 since (09c5242, the SSA and force-conflicts fix that every RKE2
# line took in July 2026: rancher/rke2#10957..10961). docs/lab.md, "Helm as RKE2 runs it".
HELM_VERSION=v4.1.4
HELM3_VERSION=v3.18.4
HELM_CONTROLLER_VERSION=v0.16.27
RKE2_VERSION=v1.34.1+rke2r1
RKE2_COMMIT=98b87c78e2c5a09fd8ff07bcaf4f102db1894a93
cache_root=${GPUPLATFORM_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuplatform-rke2-lab}

log() { printf '[lab-build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# claim NAME OUT: returns 1 when OUT is there (cached), else 0 holding OUT.lock (flock) for the rest of the
# calling subshell, the lock going with the process that holds its descriptor. Suites run side by side (make test
# runs lab suites beside the integration suite) and may ask for the same binary at once: one builds it, the
# others wait and find it built.
claim() {
  local name=$1 out=$2
  if [ -x "$out" ]; then log "$name: cached"; return 1; fi
  exec 9>"$out.lock"
  if ! flock -n 9; then
    log "$name: another run is building it; waiting for that build"
    flock 9
  fi
  if [ -x "$out" ]; then log "$name: built by the run it waited for"; return 1; fi
}

# build_one NAME OUT DIR PACKAGE LDFLAGS [TAGS]: go build PACKAGE in DIR to OUT, unless cached.
build_one() (
  local name=$1 out=$2 dir=$3 pkg=$4 ldflags=$5 tags=${6:-}
  claim "$name" "$out" || return 0
  log "$name: building $pkg (cold builds take minutes on 2 cores) ..."
  local start=$SECONDS
  (cd "$dir" && go build -trimpath ${tags:+-tags "$tags"} -ldflags "$ldflags" -o "$out.tmp" "$pkg")
  mv "$out.tmp" "$out"
  log "$name: built in $((SECONDS - start))s"
)

# install_one NAME BIN MODULE@VERSION LDFLAGS: go install from the module proxy into BIN, unless cached.
install_one() (
  local name=$1 bin=$2 module=$3 ldflags=$4
  claim "$name" "$bin/$name" || return 0
  log "$name: go install $module ..."
  local start=$SECONDS
  GOFLAGS= GOBIN="$bin" CGO_ENABLED=0 go install -trimpath -ldflags "$ldflags" "$module"
  log "$name: built in $((SECONDS - start))s"
)

control_plane() {
  # The cache key is the pins alone (module files, versions, the Go toolchain, build flags
  # version), so editing this script's messages does not trigger a rebuild.
  local recipe=1   # bump when the go build flags below change
  local pin_hash bin
  pin_hash=$( (cat "$here/gobuild/go.mod" "$here/gobuild/go.sum" "$here/gobuild/cmd/etcd/main.go";
               echo "$K8S_VERSION $KWOK_VERSION $recipe"; go env GOVERSION) | sha256sum | cut -c1-16)
  bin="$cache_root/$pin_hash/bin"
  mkdir -p "$bin"
  local major minor
  major=$(echo "${K8S_VERSION#v}" | cut -d. -f1)
  minor=$(echo "${K8S_VERSION#v}" | cut -d. -f2)
  local ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} \
 -X k8s.io/component-base/version.gitMajor=${major} -X k8s.io/component-base/version.gitMinor=${minor} \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION} \
 -X k8s.io/client-go/pkg/version.gitMajor=${major} -X k8s.io/client-go/pkg/version.gitMinor=${minor}"
  log "control plane pins: kubernetes ${K8S_VERSION}, etcd (gobuild/go.mod), kwok ${KWOK_VERSION}; cache $bin"
  export CGO_ENABLED=0
  local cmd
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    GOFLAGS=-mod=mod build_one "$cmd" "$bin/$cmd" "$here/gobuild" "k8s.io/kubernetes/cmd/$cmd" "$ldflags" selinux,notest
  done
  GOFLAGS=-mod=mod build_one etcd "$bin/etcd" "$here/gobuild" ./cmd/etcd "-s -w"
  # After the chain of four, not beside it: a third build beside it and the helm tools' group made
  # kube-apiserver, which heads the longest chain, 931 s cold instead of 653 s (2026-12-06).
  install_one kwok "$bin" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}" "-s -w"
  echo "$bin"
}

helm_tools() {
  local recipe=1
  local pin_hash bin
  pin_hash=$( (echo "helm ${HELM_VERSION} ${HELM3_VERSION} helm-controller ${HELM_CONTROLLER_VERSION} $recipe";
                go env GOVERSION) | sha256sum | cut -c1-16)
  bin="$cache_root/helm-tools-$pin_hash/bin"
  mkdir -p "$bin/v3"
  log "helm pins: helm ${HELM_VERSION}${1:+ and ${HELM3_VERSION}}, helm-controller ${HELM_CONTROLLER_VERSION}; cache $bin"
  local version major dest
  for version in "$HELM_VERSION" ${1:+"$HELM3_VERSION"}; do
    major=${version%%.*}   # the module path names its major version
    dest=$bin
    if [ "$major" = v3 ]; then dest=$bin/v3; fi
    install_one helm "$dest" "helm.sh/helm/${major}/cmd/helm@${version}" \
      "-s -w -X helm.sh/helm/${major}/internal/version.version=${version} -X helm.sh/helm/${major}/internal/version.gitTreeState=clean"
  done
  install_one helm-controller "$bin" "github.com/k3s-io/helm-controller@${HELM_CONTROLLER_VERSION}" \
    "-s -w -X github.com/k3s-io/helm-controller/pkg/version.Version=${HELM_CONTROLLER_VERSION}"
  echo "$bin"
}

gpu_operator() {
  # VERSION: the tag of SRC (tests/lab/upstream.py OPERATOR_TAG, which is part of KEY), stamped as the release
  # stamps it.
  local src=$1 key=$2 version=$3
  local out="$cache_root/gpu-operator-$key/gpu-operator"
  mkdir -p "$(dirname "$out")"
  log "GPU Operator ${version} from $src; cache $(dirname "$out")"
  CGO_ENABLED=0 GOFLAGS=-mod=vendor build_one gpu-operator "$out" "$src" ./cmd/gpu-operator \
    "-s -w -X github.com/NVIDIA/gpu-operator/internal/info.version=${version}"
  echo "$out"
}

rke2() {
  # What scripts/build-binary and scripts/version.sh at the tag pass, minus GOEXPERIMENT=boringcrypto
  # (FIPS crypto; no effect on flags or config parsing). UpstreamGolang: the server refuses to start
  # unless it equals the Go that built it (k3s pkg/cli/cmds/golang.go); the release stamps the Go of
  # Kubernetes' build/dependencies.yaml and builds with it, the lab stamps the Go it builds with.
  # tests/lab/upstream.py RKE2_RECIPE is part of the cache key: bump it when these flags change.
  local src=$1 key=$2
  local out="$cache_root/rke2-$key/rke2"
  local k3s=github.com/k3s-io/k3s rke2_pkg=github.com/rancher/rke2
  local tags=selinux,netgo,osusergo,no_stage,static_build,sqlite_omit_load_extension,no_embedded_executor,no_cri_dockerd
  local ldflags="-extldflags -static -w \
 -X $k3s/pkg/version.Program=rke2 -X $k3s/pkg/version.Version=${RKE2_VERSION} \
 -X $k3s/pkg/version.GitCommit=${RKE2_COMMIT} -X $k3s/pkg/version.UpstreamGolang=$(go env GOVERSION) \
 -X $rke2_pkg/pkg/images.DefaultRegistry=docker.io \
 -X $rke2_pkg/pkg/images.DefaultEtcdImage=rancher/hardened-etcd:v3.6.4-k3s3-build20250908 \
 -X $rke2_pkg/pkg/images.DefaultKubernetesImage=rancher/hardened-kubernetes:v1.34.1-rke2r1-build20250910 \
 -X $rke2_pkg/pkg/images.DefaultPauseImage=rancher/mirrored-pause:3.6 \
 -X $rke2_pkg/pkg/images.DefaultRuntimeImage=rancher/rke2-runtime:${RKE2_VERSION/+/-} \
 -X $rke2_pkg/pkg/images.DefaultCloudControllerManagerImage=rancher/rke2-cloud-provider:v1.33.0-rc1.0.20250905195603-857412ae5891-build20250908"
  mkdir -p "$(dirname "$out")"
  log "rke2 ${RKE2_VERSION} from $src; cache $(dirname "$out")"
  CGO_ENABLED=1 CGO_CFLAGS="-DSQLITE_ENABLE_DBSTAT_VTAB=1 -DSQLITE_USE_ALLOCA=1" GOFLAGS=-mod=mod \
    build_one rke2 "$out" "$src" . "$ldflags" "$tags"
  echo "$out"
}

started=$SECONDS
case "${1:-control-plane}" in
  control-plane) control_plane ;;
  helm-tools) [ $# -eq 1 ] || { [ $# -eq 2 ] && [ "$2" = v3 ]; } || { echo "usage: $0 helm-tools [v3]" >&2; exit 2; }
    helm_tools "${2:-}" ;;
  gpu-operator) [ $# -eq 4 ] || { echo "usage: $0 gpu-operator SRC KEY VERSION" >&2; exit 2; }
    gpu_operator "$2" "$3" "$4" ;;
  rke2) [ $# -eq 3 ] || { echo "usage: $0 rke2 SRC KEY" >&2; exit 2; }; rke2 "$2" "$3" ;;
  *) echo "usage: $0 [control-plane|helm-tools [v3]|gpu-operator SRC KEY VERSION|rke2 SRC KEY]" >&2; exit 2 ;;
esac
log "${1:-control-plane} ready in $((SECONDS - started))s"
