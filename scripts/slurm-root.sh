#!/usr/bin/env bash
# A Slurm release for the local stack (docs/slurm-versions.md):
#
#   scripts/slurm-root.sh build VERSION    make (once) and print the release root of VERSION
#                                          (a root made before a package joined PACKAGES gets it added)
#   scripts/slurm-root.sh path VERSION     print where that root is (built or not)
#   scripts/slurm-root.sh mount VERSION DIR...   bind-mount DIRs into the root at the same paths
#   scripts/slurm-root.sh remove VERSION   unmount everything in the root, then delete it
#
# Never delete a root with `rm -rf` alone: the stack's folders (the checkout, /tmp) are bind-mounted
# into it, and rm would go through the mounts into them. `remove` unmounts first.
# VERSION is 24.11 (Debian 13 trixie) or 26.05 (Debian sid); 22.05 is the host's own packages
# (Debian 12) and needs no root. A root is a Debian tree made with debootstrap from Debian's
# packages, holding that release's slurmctld, slurmd, slurmdbd, slurmrestd and clients. It is built
# into a temporary folder and renamed into place when complete, so an interrupted build is never
# taken for a root; it lives outside the checkout (RELAUNCH_CACHE_DIR, default /var/cache/relaunch
# as root) so that every clone and CI run reuses it, and is rebuilt when missing.
set -euo pipefail

CACHE=${RELAUNCH_CACHE_DIR:-/var/cache/relaunch}
say() { printf '\033[1m[slurm-root]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[31m[slurm-root] %s\033[0m\n' "$*" >&2; exit 1; }

suite_of() {
  case "$1" in
    24.11) echo trixie ;;
    26.05) echo sid ;;
    *) die "unknown Slurm release '$1': use 22.05 (the host's), 24.11 or 26.05" ;;
  esac
}

root_of() { echo "$CACHE/slurm-roots/$1"; }

# What a root holds. slurm-wlm-jwt-plugin: auth/jwt for slurmctld and slurmdbd, so that slurmrestd's
# clients (the actuator with SLURM_API=rest) can authenticate with a token.
PACKAGES=(slurmctld slurmd slurm-client slurmdbd slurmrestd slurm-wlm-jwt-plugin munge procps)
APT=(apt-get -o Acquire::Check-Valid-Until=false -q)  # sid's Release file is seen as expired; harmless on trixie

# A root built before a package joined PACKAGES: install what is missing in place (additive, so a
# stack running from the root is not disturbed), one process at a time.
add_missing() {
  local v=$1 root p missing=(); root=$(root_of "$v")
  for p in "${PACKAGES[@]}"; do chroot "$root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
  [ ${#missing[@]} -gt 0 ] || return 0
  [ "$(id -u)" = 0 ] || die "the Slurm $v root lacks ${missing[*]}; adding them needs root (make setup SLURM=$v as root)"
  say "adding ${missing[*]} to the Slurm $v root"
  (
    flock 9
    chroot "$root" "${APT[@]}" update >>"$root.build.log" 2>&1 \
      && DEBIAN_FRONTEND=noninteractive chroot "$root" "${APT[@]}" install -y --no-install-recommends "${missing[@]}" \
        >>"$root.build.log" 2>&1 && chroot "$root" apt-get clean
  ) 9>"$root.lock" || { tail -20 "$root.build.log" >&2; die "adding ${missing[*]} to the Slurm $v root failed"; }
}

# The marker tells wrappers that they already run inside this root (a job script's srun, say).
MARKER=.relaunch-slurm-root

build() {
  local v=$1 suite root tmp
  suite=$(suite_of "$v"); root=$(root_of "$v")
  if [ -f "$root/$MARKER" ]; then add_missing "$v"; echo "$root"; return 0; fi
  [ "$(id -u)" = 0 ] || die "building the Slurm $v root needs root (debootstrap, chroot); run make setup SLURM=$v as root"
  command -v debootstrap >/dev/null || {
    say "installing debootstrap"
    # Two builds started together (24.11 and 26.05) would race for dpkg's lock: wait for it.
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends \
      debootstrap >/dev/null
  }
  mkdir -p "$CACHE/slurm-roots"
  tmp=$(mktemp -d "$CACHE/slurm-roots/.build-$v.XXXXXX")
  chmod 755 "$tmp"  # mktemp makes it 700: package scripts that switch to a system user (munge) need /
  # Mounts made in the temporary root are undone however the build ends.
  trap 'umount "$tmp/proc" 2>/dev/null || true; rm -rf --one-file-system "$tmp"' EXIT
  local mirror=${RELAUNCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  say "building the Slurm $v root (Debian $suite, debootstrap; about 2 minutes, once) in $root"
  debootstrap --variant=minbase "$suite" "$tmp" "$mirror" >"$tmp.log" 2>&1 \
    || { tail -20 "$tmp.log" >&2; die "debootstrap $suite failed (log above; mirror $mirror)"; }
  mount --bind /proc "$tmp/proc"
  cp /etc/hosts "$tmp/etc/hosts"   # minbase has none; slurmctld must resolve localhost
  chroot "$tmp" "${APT[@]}" update >>"$tmp.log" 2>&1 || { tail -20 "$tmp.log" >&2; die "apt-get update in the $v root failed"; }
  DEBIAN_FRONTEND=noninteractive chroot "$tmp" "${APT[@]}" install -y --no-install-recommends \
    "${PACKAGES[@]}" >>"$tmp.log" 2>&1 \
    || { tail -20 "$tmp.log" >&2; die "installing Slurm in the $v root failed"; }
  chroot "$tmp" apt-get clean
  local got; got=$(chroot "$tmp" /usr/sbin/slurmctld -V | awk '{print $2}')
  case "$got" in "$v".*) ;; *) die "the $suite root holds Slurm $got, not $v.x (Debian moved on?)" ;; esac
  umount "$tmp/proc"
  echo "$got" > "$tmp/$MARKER"
  # A half-made root left by an older build may still have the stack's folders bind-mounted in it:
  # never delete through a mount.
  if grep -q " $root/" /proc/mounts; then die "$root has mounts in it (umount them first); not replacing it"; fi
  rm -rf "$root"; mv "$tmp" "$root"; mv "$tmp.log" "$root.build.log"
  trap - EXIT
  say "Slurm $got ready in $root"
  echo "$root"
}

# Bind-mount each DIR (absolute) into the root at the same path, once: the stack's run folder, the
# checkout, /tmp, the Python of the venv, so that paths in slurm.conf, job scripts and job output are
# the same inside and outside. /proc and /dev too. Mounts stay until the machine reboots; a second
# stack on the same release reuses them.
mount_into() {
  local v=$1 root d; root=$(root_of "$v"); shift
  [ -f "$root/$MARKER" ] || die "no Slurm $v root in $root: run make setup SLURM=$v"
  local dirs=() other covered
  for d in "$@"; do
    d=$(realpath -m "$d"); covered=0
    for other in "$@"; do  # a folder inside another one on the list comes with it
      other=$(realpath -m "$other")
      case "$d" in "$other"/*) covered=1 ;; esac
    done
    [ "$covered" = 1 ] || dirs+=("$d")
  done
  for d in /proc /dev "${dirs[@]}"; do
    [ -d "$d" ] || continue
    mkdir -p "$root$d"
    if mountpoint -q "$root$d" 2>/dev/null; then
      # A folder deleted and made again (a test stack starts afresh) leaves the old mount pointing at
      # the deleted one: mount the new one instead.
      [ "$(stat -c %d:%i "$d")" = "$(stat -c %d:%i "$root$d")" ] && continue
      umount -l "$root$d" || die "could not replace the stale mount $root$d"
    fi
    mount --bind "$d" "$root$d" || die "could not bind-mount $d into $root (needs root)"
  done
  cp /etc/hosts "$root/etc/hosts"
}

remove() {
  local v=$1 root m; root=$(root_of "$v")
  [ -d "$root" ] || return 0
  # Deepest first; lazily, since a daemon of a stack may still hold a mount.
  for m in $(awk -v r="$root/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r); do umount -l "$m"; done
  if grep -q " $root/" /proc/mounts; then die "could not unmount everything in $root"; fi
  rm -rf "$root" "$root.build.log"
  say "removed $root"
}

case "${1:-}" in
  build) build "${2:?version}" ;;
  remove) suite_of "${2:?version}" >/dev/null; remove "$2" ;;
  path) suite_of "${2:?version}" >/dev/null; root_of "$2" ;;
  mount) v=${2:?version}; shift 2; mount_into "$v" "$@" ;;
  *) echo "usage: $0 build|path|remove VERSION | mount VERSION DIR..." >&2; exit 2 ;;
esac
