#!/bin/sh
# mk/fresh-check.sh - `make fresh-check`: what a newcomer sees.  Builds a
# clean Debian 12 (bookworm) chroot with debootstrap holding only make and
# gcc, clones HEAD into it, and runs the README's two commands as root:
#   printf 'print(#lm.devices())\n' | make run    -> prints 2 (CPU + lavapipe)
#   make test                                     -> no failure, no Vulkan suite skipped
# Optional and slow (it installs every dependency); not part of CI.  Needs
# root and the host's Debian mirror (read from its apt sources).
# FRESH_ROOT (default /var/tmp/lumen-fresh-root) is created anew each run.
set -u
[ "$(id -u)" = 0 ] || { echo "fresh-check: needs root (debootstrap, chroot)"; exit 1; }
command -v debootstrap >/dev/null 2>&1 || {
  echo "fresh-check: installing debootstrap"
  apt-get install -y -q debootstrap >/dev/null || exit 1
}
ROOT=${FRESH_ROOT:-/var/tmp/lumen-fresh-root}
SRC=$(pwd)
LOG=${FRESH_LOG:-$SRC/build/fresh-check.log}
mkdir -p "$(dirname "$LOG")"
: > "$LOG"

# the host's Debian mirror, read as mk/glslang.sh reads it (no address is
# written into the project)
MIRROR=$(sh mk/apt_mirror.sh) || { echo "fresh-check: no Debian mirror in the host's apt sources"; exit 1; }

mounted=
cleanup() {
  for m in $mounted; do umount -l "$ROOT$m" 2>/dev/null; done
}
trap cleanup EXIT INT TERM

for m in /dev/pts /dev /sys /proc; do umount -l "$ROOT$m" 2>/dev/null; done
rm -rf --one-file-system "$ROOT"
echo "fresh-check: debootstrap bookworm (minbase + make, gcc) into $ROOT"
debootstrap --variant=minbase --include=make,gcc bookworm "$ROOT" "$MIRROR" >>"$LOG" 2>&1 \
  || { echo "fresh-check: debootstrap failed (log: $LOG)"; tail -5 "$LOG"; exit 1; }
# the same suites the host uses (updates and security), if it lists them
[ -f /etc/apt/sources.list.d/debian.sources ] && cp /etc/apt/sources.list.d/debian.sources "$ROOT/etc/apt/sources.list.d/"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null
mount -t proc proc "$ROOT/proc" && mounted="/proc $mounted"
mount --rbind /sys "$ROOT/sys" && mounted="/sys $mounted"
mount --rbind /dev "$ROOT/dev" && mounted="/dev $mounted"

echo "fresh-check: git clone of HEAD into $ROOT/root/lumen"
git clone -q --no-hardlinks "$SRC" "$ROOT/root/lumen" || exit 1

# A machine of this workplace reaches the npm registry through its network's
# certificate authority (the host names it in NODE_EXTRA_CA_CERTS); the
# chroot gets the same file and setting, nothing else of the host's.
extra_ca=
if [ -n "${NODE_EXTRA_CA_CERTS:-}" ] && [ -f "$NODE_EXTRA_CA_CERTS" ]; then
  cp "$NODE_EXTRA_CA_CERTS" "$ROOT/root/host-extra-ca.crt" && extra_ca="NODE_EXTRA_CA_CERTS=/root/host-extra-ca.crt"
fi
in_root() { chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb LANG=C.UTF-8 $extra_ca /bin/sh -c "cd /root/lumen && $1"; }

fail=0
echo "fresh-check: printf 'print(#lm.devices())' | make run"
out=$(in_root "printf 'print(#lm.devices())\n' | make run" 2>&1); rc=$?
echo "$out" >>"$LOG"
last=$(echo "$out" | tail -1)
if [ $rc = 0 ] && [ "$last" = 2 ]; then
  echo "  ok: make run started the REPL and lm.devices() has 2 entries"
else
  echo "  FAIL: make run (status $rc), last line: $last"; echo "$out" | tail -15 | sed 's/^/  | /'; fail=1
fi

echo "fresh-check: make test"
out=$(in_root "make test" 2>&1); rc=$?
echo "$out" >>"$LOG"
summary=$(echo "$out" | tail -1)
vkskips=$(echo "$out" | sed -n '/^skipped suites:/,/^[0-9]/p' | grep -ci vulkan)
if [ $rc = 0 ] && [ "$vkskips" = 0 ] && echo "$summary" | grep -Eq '^[0-9]+ passed, 0 failed, [0-9]+ skipped$'; then
  echo "  ok: $summary; no Vulkan suite skipped"
else
  echo "  FAIL: make test (status $rc, $vkskips Vulkan suites skipped): $summary"
  echo "$out" | grep -E '^(== |  |FAIL)' | grep -v ': [0-9]* passed, 0 failed, 0 skipped$' | tail -20 | sed 's/^/  | /'
  fail=1
fi
echo "fresh-check: log in $LOG"
[ $fail = 0 ] && echo "fresh-check: passed" || echo "fresh-check: FAILED"
exit $fail
