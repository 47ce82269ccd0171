#!/usr/bin/env bash
# Copy every image of an air-gap plan (sites/<site>/airgap/images.txt, written by
# `make airgap/plan`) into the site's mirror. Run it on a host that reaches both the
# internet registries and the mirror; `make airgap/mirror SITE=<site>` calls it.
#
#   scripts/airgap-mirror.sh [--tool skopeo|crane] [--dry-run] [--insecure-dest] images.txt
#
# Before copying anything it checks that a copy tool is there, that the mirror answers,
# and that every source image exists (which also proves the network and the credentials);
# any failure there stops it with nothing copied. A copy that fails stops the run and names
# what was copied and what was not: it never half-copies silently. Copies are multi-arch
# (the whole manifest list) and safe to repeat: blobs the mirror has are not sent again.
# Lines whose source already is the mirror reference (images built for the site, such as
# the vGPU manager) are checked to exist in the mirror, not copied. A line whose comment
# ends with the platforms its nodes need ("[linux/amd64, linux/arm64]") is refused when the
# source is an index without one of them, or a single-platform image while several are needed.
set -euo pipefail

usage() {
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

tool=""
dry_run=0
insecure=0
plan=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tool) tool="${2:-}"; shift 2 ;;
    --tool=*) tool="${1#--tool=}"; shift ;;
    --dry-run) dry_run=1; shift ;;
    --insecure-dest) insecure=1; shift ;;
    -h|--help) usage ;;
    -*) echo "airgap-mirror: unknown option $1" >&2; usage ;;
    *) plan="$1"; shift ;;
  esac
done

fail() {
  echo "airgap-mirror: $*" >&2
  exit 1
}

[ -n "$plan" ] || usage
[ -r "$plan" ] || fail "no plan at $plan: run 'make airgap/plan SITE=<site>' first"

if [ -z "$tool" ]; then
  if command -v skopeo >/dev/null 2>&1; then tool=skopeo
  elif command -v crane >/dev/null 2>&1; then tool=crane
  else
    fail "neither skopeo nor crane is installed: install one (apt-get install skopeo, or crane from" \
         "github.com/google/go-containerregistry) on a connected host; nothing was copied"
  fi
fi
case "$tool" in
  skopeo|crane) command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed; nothing was copied" ;;
  *) fail "--tool must be skopeo or crane, not '$tool'" ;;
esac

# source -> mirror pairs; comments and blank lines skipped.
sources=()
mirrors=()
platforms=()
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
  lineno=$((lineno + 1))
  wanted=""
  case "$line" in
    *"#"*"[linux/"*"]") wanted="${line##*[}"; wanted="${wanted%]}"; wanted="${wanted//,/ }" ;;
  esac
  line="${line%%#*}"
  line="${line#"${line%%[![:space:]]*}"}"
  line="${line%"${line##*[![:space:]]}"}"
  [ -n "$line" ] || continue
  case "$line" in
    *" -> "*) ;;
    *) fail "$plan line $lineno has no mirror (\"$line\"): set gpu_operator_image_registry and run make airgap/plan again" ;;
  esac
  src="${line%% -> *}"
  dst="${line##* -> }"
  { [ -n "$src" ] && [ -n "$dst" ] && [ "${dst#* }" = "$dst" ]; } || fail "$plan line $lineno is not 'source -> mirror': $line"
  sources+=("$src")
  mirrors+=("$dst")
  platforms+=("$wanted")
done < "$plan"
[ "${#sources[@]}" -gt 0 ] || fail "$plan lists no images"

inspect() { # inspect REF [insecure]: the image's manifest (does it exist, can we reach its registry?)
  if [ "$tool" = skopeo ]; then
    if [ "${2:-0}" = 1 ]; then skopeo inspect --raw --tls-verify=false "docker://$1"
    else skopeo inspect --raw "docker://$1"; fi
  else
    if [ "${2:-0}" = 1 ]; then crane manifest --insecure "$1"
    else crane manifest "$1"; fi
  fi
}

lacking() { # lacking MANIFEST "linux/amd64 linux/arm64": the wanted platforms the manifest cannot serve
  local manifest="$1" platform arch out=""
  set -- $2
  [ $# -gt 0 ] || return 0
  if ! grep -q '"manifests"' <<<"$manifest"; then
    # One platform's image: enough for one platform, never for several.
    [ $# -gt 1 ] && echo "$* (a single-platform image, not an index)"
    return 0
  fi
  for platform in "$@"; do
    arch="${platform#linux/}"
    grep -Eq "\"architecture\"[[:space:]]*:[[:space:]]*\"$arch\"" <<<"$manifest" || out="$out $platform"
  done
  [ -z "$out" ] || echo "${out# }"
}

copy() { # copy SRC DST
  if [ "$tool" = skopeo ]; then
    if [ "$insecure" = 1 ]; then skopeo copy --all --retry-times 3 --dest-tls-verify=false "docker://$1" "docker://$2"
    else skopeo copy --all --retry-times 3 "docker://$1" "docker://$2"; fi
  else
    if [ "$insecure" = 1 ]; then crane copy --insecure "$1" "$2"
    else crane copy "$1" "$2"; fi
  fi
}

# 1. The mirror answers (a TCP connection to each mirror registry).
declare -A registries=()
for dst in "${mirrors[@]}"; do registries["${dst%%/*}"]=1; done
for registry in "${!registries[@]}"; do
  host="${registry%%:*}"
  port=443
  [ "$host" != "$registry" ] && port="${registry##*:}"
  if ! timeout 5 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null; then
    fail "the mirror $registry does not answer on port $port: is this host connected to the site's registry? nothing was copied"
  fi
done

# 2. Every source exists; site-built images are already in the mirror.
missing=()
short=()
for i in "${!sources[@]}"; do
  if [ "${sources[$i]}" = "${mirrors[$i]}" ]; then
    ref="${mirrors[$i]}"
    manifest="$(inspect "$ref" "$insecure" 2>/dev/null)" || { missing+=("$ref (built for the site: push it to the mirror)"); continue; }
  else
    ref="${sources[$i]}"
    manifest="$(inspect "$ref" 2>/dev/null)" || { missing+=("$ref"); continue; }
  fi
  gap="$(lacking "$manifest" "${platforms[$i]}")"
  [ -z "$gap" ] || short+=("$ref lacks $gap")
done
if [ "${#missing[@]}" -gt 0 ]; then
  printf 'airgap-mirror: cannot read these images (no network to their registry, no credentials, or no such tag):\n' >&2
  printf '  %s\n' "${missing[@]}" >&2
  fail "nothing was copied"
fi
if [ "${#short[@]}" -gt 0 ]; then
  printf 'airgap-mirror: these images lack platforms the site'"'"'s nodes need (the plan says which, per line):\n' >&2
  printf '  %s\n' "${short[@]}" >&2
  fail "nothing was copied; use a tag built for every platform listed, or rebuild the site's image for them"
fi

# 3. Copy.
todo=()
for i in "${!sources[@]}"; do
  [ "${sources[$i]}" = "${mirrors[$i]}" ] || todo+=("$i")
done
echo "airgap-mirror: ${#todo[@]} image(s) to copy with $tool, $((${#sources[@]} - ${#todo[@]})) already in the mirror"
if [ "$dry_run" = 1 ]; then
  for i in "${todo[@]}"; do echo "would copy ${sources[$i]} -> ${mirrors[$i]}"; done
  exit 0
fi
done_count=0
for i in "${todo[@]}"; do
  echo "copying ${sources[$i]} -> ${mirrors[$i]}"
  if ! copy "${sources[$i]}" "${mirrors[$i]}"; then
    echo "airgap-mirror: copying ${sources[$i]} failed after $done_count of ${#todo[@]} image(s)." >&2
    echo "  copied:     $done_count" >&2
    echo "  not copied: $(( ${#todo[@]} - done_count )) (this one and the rest; run again to resume)" >&2
    exit 1
  fi
  done_count=$((done_count + 1))
done
echo "airgap-mirror: copied $done_count image(s) into the mirror"
