#!/bin/sh
# tests/apt_mirror.sh - mk/apt_mirror.sh finds the Debian mirror of the
# machine's apt sources in both forms (one-line .list, deb822 .sources), in
# apt's order, skipping comments, disabled stanzas, security/updates suites
# and third parties; mk/glslang.sh uses it (no mirror named in the project)
# and says why when there is none.  Mirrors here are file: URIs (no host).
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0
T=$(mktemp -d /tmp/lumen_aptmirror_XXXXXX)
trap 'rm -rf "$T"' EXIT
check() {   # check NAME WANT GOT
  if [ "$2" = "$3" ]; then pass=$((pass + 1)); else echo "FAIL $1: want '$2', got '$3'"; fail=$((fail + 1)); fi
}
setup() { rm -rf "$T/etc"; mkdir -p "$T/etc/sources.list.d"; }

# deb822 only (Debian 12's default layout), security first, a third party after
setup
cat > "$T/etc/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: file:///srv/security
Suites: bookworm-security
Components: main

# a comment
Types: deb deb-src
URIs: file:///srv/debian/ file:///srv/other
Suites: bookworm bookworm-updates
Components: main
EOF
cat > "$T/etc/sources.list.d/zz-vendor.sources" <<'EOF'
Types: deb
URIs: file:///srv/vendor
Suites: nodistro
Components: main
EOF
check "deb822" "file:///srv/debian" "$(sh mk/apt_mirror.sh "$T/etc")"

# one-line sources.list with options and comments comes first
setup
cat > "$T/etc/sources.list" <<'EOF'
# deb file:///srv/commented bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] file:///srv/oneline trixie main
EOF
printf 'Types: deb\nURIs: file:///srv/later\nSuites: trixie\nComponents: main\n' > "$T/etc/sources.list.d/a.sources"
check "sources.list first" "file:///srv/oneline" "$(sh mk/apt_mirror.sh "$T/etc")"

# a disabled stanza and a third-party .list are skipped; files in name order
setup
printf 'Types: deb\nURIs: file:///srv/off\nSuites: trixie\nEnabled: no\n' > "$T/etc/sources.list.d/a.sources"
echo 'deb file:///srv/vendor cloud-sdk-bookworm main' > "$T/etc/sources.list.d/b.list"
echo 'deb-src file:///srv/src sid main' > "$T/etc/sources.list.d/c.list"
check "disabled, vendor skipped" "file:///srv/src" "$(sh mk/apt_mirror.sh "$T/etc")"

# none: exit 1, nothing printed
setup
echo 'deb file:///srv/ubuntu noble main' > "$T/etc/sources.list"
out=$(sh mk/apt_mirror.sh "$T/etc"); rc=$?
check "no Debian mirror: status" "1" "$rc"
check "no Debian mirror: output" "" "$out"

# glslang.sh with no mirror says so (and records it), without a network
mkdir -p "$T/tools"
if command -v cmake >/dev/null 2>&1 && command -v dpkg-source >/dev/null 2>&1; then
  out=$(LUMEN_APT_ETC="$T/etc" sh mk/glslang.sh "$T/tools" 2>&1)
  case "$out" in
    *"no Debian mirror in the machine's apt sources"*"LUMEN_DEBIAN_MIRROR"*) pass=$((pass + 1)) ;;
    *) echo "FAIL glslang.sh without a mirror: $out"; fail=$((fail + 1)) ;;
  esac
fi

# the project names no mirror host (the default deb-src line read one)
if grep -n 'deb\.debian\.org\|archive\.ubuntu\.com\|ftp\.[a-z.]*debian' mk/*.sh mk/*.mk README.md docs/*.md >/dev/null 2>&1; then
  echo "FAIL a mirror host is named:"; grep -n 'deb\.debian\.org\|archive\.ubuntu\.com\|ftp\.[a-z.]*debian' mk/*.sh mk/*.mk README.md docs/*.md
  fail=$((fail + 1))
else
  pass=$((pass + 1))
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
