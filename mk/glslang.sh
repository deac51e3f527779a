#!/bin/sh
# mk/glslang.sh TOOLS - glslang 15 and the Vulkan 1.4 headers from Debian 13's
# source packages, built once into TOOLS (build/tools).  Debian 12's shader
# compilers (glslc 2023.2, glslang 12) reject GL_KHR_cooperative_matrix;
# Debian 13's glslang binaries need glibc 2.38, but its source builds here.
#
# Writes TOOLS/glslang.mk for make to include:
#   GLSLANG15 := TOOLS/bin/glslang-VERSION   (empty when not available)
#   GLSLANG15_WHY := why not (empty when available)
# The result is kept per version (TOOLS/glslang-VERSION.ok or .failed), so a
# later make costs one test of a file.  A failure (no archive reachable, no
# cmake) is recorded with its reason and not retried until that file is
# removed: make prints the reason on every run that builds Vulkan.
#
# LUMEN_GLSLANG=/path/to/glslang (15 or later) is used instead, checked by
# its version line.  The Debian mirror is the one the machine's apt sources
# name (mk/apt_mirror.sh reads /etc/apt/sources.list and sources.list.d, both
# forms), so a configured mirror is used, and apt's own configuration (a
# proxy) applies; LUMEN_DEBIAN_MIRROR names another (one that carries trixie's
# sources).  The project names no mirror.  Private apt state (TOOLS/apt: a
# sources list naming only Debian 13's deb-src, its lists): the machine's apt
# set-up is untouched.
set -u
TOOLS=${1:-build/tools}
VERSION=15.1.0+1.4.309.0            # glslang source package in Debian 13
VK_VERSION=1.4.309.0                # vulkan-loader source package (carries the headers)
SUITE=trixie
mkdir -p "$TOOLS"
OUTMK="$TOOLS/glslang.mk"

emit() {   # emit PATH WHY: rewrite glslang.mk only when it changes
  printf 'GLSLANG15 := %s\nGLSLANG15_WHY := %s\n' "$1" "$2" > "$OUTMK.tmp"
  if cmp -s "$OUTMK.tmp" "$OUTMK"; then rm -f "$OUTMK.tmp"; else mv "$OUTMK.tmp" "$OUTMK"; fi
}

# "Glslang Version: 11:15.2.0": the interface version, then the release
major() { "$1" --version 2>/dev/null | sed -n 's/^Glslang Version: [0-9]*:\([0-9]*\)\..*/\1/p' | head -1; }

if [ -n "${LUMEN_GLSLANG:-}" ]; then
  m=$(major "$LUMEN_GLSLANG")
  if [ -n "$m" ] && [ "$m" -ge 15 ]; then emit "$LUMEN_GLSLANG" ""
  else emit "" "LUMEN_GLSLANG=$LUMEN_GLSLANG is not glslang 15 or later (version: ${m:-none})"; fi
  exit 0
fi

BIN="$TOOLS/bin/glslang-$VERSION"
OK="$TOOLS/glslang-$VERSION.ok"
FAILED="$TOOLS/glslang-$VERSION.failed"
if [ -f "$OK" ] && [ -x "$BIN" ]; then emit "$BIN" ""; exit 0; fi
if [ -f "$FAILED" ]; then emit "" "$(head -1 "$FAILED") (rm $FAILED to retry)"; exit 0; fi

LOG="$TOOLS/glslang-$VERSION.log"
fail() {
  rm -rf "${SRC:-/nonexistent}"
  echo "$1; log: $LOG" > "$FAILED"
  echo "make: glslang 15 not built: $1 (log: $LOG); the KHR cooperative-matrix kernels are left out"
  emit "" "$1; log: $LOG (rm $FAILED to retry)"
  exit 0
}
command -v cmake >/dev/null 2>&1 || fail "no cmake"
command -v dpkg-source >/dev/null 2>&1 || fail "no dpkg-source (dpkg-dev)"

echo "make: building glslang $VERSION from Debian 13's source into $TOOLS (once; a few minutes, log: $LOG)"
t0=$(date +%s)
APT="$TOOLS/apt"
SRC="$TOOLS/src"
rm -rf "$SRC" && mkdir -p "$APT/lists/partial" "$APT/cache" "$SRC"
: > "$LOG"
# LUMEN_APT_ETC: another apt configuration folder to read (tests/apt_mirror.sh)
if [ -n "${LUMEN_DEBIAN_MIRROR:-}" ]; then MIRROR=$LUMEN_DEBIAN_MIRROR
else
  MIRROR=$(sh "$(dirname "$0")/apt_mirror.sh" "${LUMEN_APT_ETC:-/etc/apt}") ||
    fail "no Debian mirror in the machine's apt sources (${LUMEN_APT_ETC:-/etc/apt}/sources.list, sources.list.d); set LUMEN_DEBIAN_MIRROR to one that carries $SUITE's sources"
fi
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR $SUITE main" \
  > "$APT/sources.list"
echo "Debian mirror: $MIRROR" >> "$LOG"
A=$(cd "$APT" && pwd)     # apt wants absolute paths; TOOLS may be either
APT_OPTS="-o Dir::Etc::SourceList=$A/sources.list -o Dir::Etc::SourceParts=/dev/null \
 -o Dir::State::Lists=$A/lists -o Dir::Cache=$A/cache -o Debug::NoLocking=1 \
 -o APT::Sandbox::User=root -o Acquire::Retries=0 -o Acquire::http::Timeout=30 -q"
{
  # shellcheck disable=SC2086
  apt-get $APT_OPTS update &&
  (cd "$SRC" && apt-get $APT_OPTS source --download-only "glslang=$VERSION-1" "vulkan-loader=$VK_VERSION-1")
} >> "$LOG" 2>&1 || fail "Debian 13's sources not reachable from $MIRROR (apt-get source glslang=$VERSION-1)"
rm -rf "$APT/lists"     # 20 MB of package lists, needed once
(cd "$SRC" && tar xzf "glslang_$VERSION.orig.tar.gz" && tar xJf "vulkan-loader_$VK_VERSION.orig.tar.xz") \
  >> "$LOG" 2>&1 || fail "unpacking the sources failed"

# the headers: header-only, TOOLS/include/vulkan and vk_video
rm -rf "$TOOLS/include" && mkdir -p "$TOOLS/include" &&
  cp -r "$SRC/vulkan-loader-$VK_VERSION/vulkan-headers/include/vulkan" \
        "$SRC/vulkan-loader-$VK_VERSION/vulkan-headers/include/vk_video" "$TOOLS/include/" \
  || fail "the Vulkan headers are not where expected in vulkan-loader $VK_VERSION"
find "$TOOLS/include" -name '*.hpp' -delete -o -name '*.cppm' -delete    # C only: 16 of 18 MB

# the compiler alone: no spirv-opt (ENABLE_OPT=OFF needs no SPIRV-Tools
# source), no HLSL, no tests
B="$SRC/build"
{
  cmake -S "$SRC/glslang-$VERSION" -B "$B" -DCMAKE_BUILD_TYPE=Release -DENABLE_OPT=OFF \
    -DENABLE_HLSL=OFF -DGLSLANG_TESTS=OFF -DBUILD_SHARED_LIBS=OFF -DENABLE_GLSLANG_INSTALL=OFF &&
  cmake --build "$B" --target glslang-standalone -j "${GLSLANG_JOBS:-2}"
} >> "$LOG" 2>&1 || fail "building glslang $VERSION failed"
mkdir -p "$TOOLS/bin" && cp "$B/StandAlone/glslang" "$BIN.tmp" && mv "$BIN.tmp" "$BIN" ||
  fail "no glslang binary after the build"
m=$(major "$BIN")
[ "${m:-0}" -ge 15 ] || fail "the built glslang reports version ${m:-none}"
rm -rf "$SRC"           # 150 MB of sources and objects
t1=$(date +%s)
echo "built in $((t1 - t0)) s; $(du -sh "$TOOLS" | cut -f1) in $TOOLS" >> "$LOG"
echo "make: glslang $VERSION built in $((t1 - t0)) s: $BIN"
touch "$OK"
emit "$BIN" ""
