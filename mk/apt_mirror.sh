#!/bin/sh
# mk/apt_mirror.sh [ETC_APT] - the Debian mirror this machine's apt uses, for
# mk/glslang.sh's deb-src line: the first enabled "deb" or "deb-src" entry of
# a Debian release suite (buster ... forky, sid, stable, testing, unstable;
# not -security, -updates or a third party's suite) in ETC_APT/sources.list,
# ETC_APT/sources.list.d/*.list (one-line form) and *.sources (deb822), in
# apt's order.  Prints the URI (without a trailing /) and exits 0, or prints
# nothing and exits 1.  The project names no mirror: a configured mirror (or
# a proxy, which apt's own configuration gives) is what the build uses.
ETC=${1:-/etc/apt}
SUITES='buster|bullseye|bookworm|trixie|forky|sid|oldoldstable|oldstable|stable|testing|unstable'

# one-line form: deb [options] URI SUITE COMPONENTS...
oneline() {
  sed -e 's/#.*//' "$1" | awk -v suites="^($SUITES)\$" '
    $1 != "deb" && $1 != "deb-src" { next }
    { i = 2
      if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
      uri = $i; suite = $(i + 1)
      if (uri != "" && suite ~ suites) { sub(/\/+$/, "", uri); print uri; exit } }'
}

# deb822: stanzas of Types, URIs, Suites (and Enabled) fields
deb822() {
  awk -v suites="^($SUITES)\$" '
    function flush(   n, u, s, i, j, ok) {
      if (types ~ /(^| )deb(-src)?( |$)/ && enabled != "no") {
        n = split(uris, u, " "); split(suite_list, s, " ")
        for (j in s) if (s[j] ~ suites) ok = 1
        if (ok && n > 0) { uri = u[1]; sub(/\/+$/, "", uri); print uri; found = 1; exit }
      }
      types = uris = suite_list = enabled = ""
    }
    /^[ \t]*#/ { next }
    /^[ \t]*$/ { flush(); next }
    { line = $0; key = line; sub(/:.*/, "", key); val = line; sub(/^[^:]*:[ \t]*/, "", val)
      key = tolower(key)
      if (key == "types") types = val
      else if (key == "uris") uris = val
      else if (key == "suites") suite_list = val
      else if (key == "enabled") enabled = tolower(val) }
    END { if (!found) flush() }' "$1"
}

try() {   # try FILE: print its mirror and stop
  [ -f "$1" ] || return 1
  case "$1" in
    *.sources) m=$(deb822 "$1") ;;
    *) m=$(oneline "$1") ;;
  esac
  [ -n "$m" ] || return 1
  echo "$m"
  exit 0
}

try "$ETC/sources.list"
for f in "$ETC"/sources.list.d/*; do   # apt's order: by name, both forms
  case "$f" in *.list|*.sources) try "$f" ;; esac
done
exit 1
