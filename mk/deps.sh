#!/bin/sh
# mk/deps.sh PKG... - the dependency step every user-facing make target runs
# first: installs the Debian packages that are missing (as root), or prints
# the apt-get line and fails (as anyone else).  Cheap when all are there
# (one dpkg-query).  A word TOOL=PKG+PKG means "PKG+PKG unless the command
# TOOL is on PATH" (node and npm may come from elsewhere than Debian).
missing=
have=$(dpkg-query -W -f='${Package} ${Status}\n' 2>/dev/null | awk '$NF == "installed" {print $1}')
for w in "$@"; do
  case $w in
    *=*) command -v "${w%%=*}" >/dev/null 2>&1 && continue
         pkgs=$(echo "${w#*=}" | tr + ' ') ;;
    *)   pkgs=$w ;;
  esac
  for p in $pkgs; do
    echo "$have" | grep -qx "$p" || missing="$missing $p"
  done
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "make: installing Debian packages:$missing"
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing || exit 1
else
  echo "make: missing Debian packages; as root run:"
  echo "  apt-get install -y$missing"
  exit 1
fi
