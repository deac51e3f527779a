#!/bin/sh
# tests/serve/fetch.sh [DIR] - the test client of tests/serve/run.sh: the
# `openai` npm package (Apache-2.0, no dependencies), pinned by version and
# npm integrity hash, unpacked into DIR/node_modules/openai (default
# build/node).  Run at set-up (`make test`'s prerequisites), never by the
# test itself.  Idempotent: a package already unpacked from a checked
# tarball is left alone.  Exit 77 when npm is missing or cannot reach its
# registry (the test then skips the client's part with that reason); a
# tarball whose hash differs is an error.
set -eu
DIR=${1:-${BUILD:-build}/node}
NAME=openai
VERSION=5.23.2
SHA=MQBzmTulj+MM5O8SKEk/gL8a7s5mktS9zUtAkU257WjvobGc9nKcBuVwjyEEcb9SI8a8Y2G/mzn3vm9n1Jlleg==
dest="$DIR/node_modules/$NAME"
want="sha512-$SHA"
if [ -f "$dest/.integrity" ] && [ "$(cat "$dest/.integrity")" = "$want" ] && [ -f "$dest/package.json" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "serve-client: $NAME missing and npm is not installed (apt-get install npm)" >&2
  exit 77
fi
mkdir -p "$DIR/node_modules"
tmp=$(mktemp -d "$DIR/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "serve-client: npm pack $NAME@$VERSION"
if ! (cd "$tmp" && npm pack --loglevel=error "$NAME@$VERSION") >"$tmp/npm.log" 2>&1; then
  echo "serve-client: npm pack $NAME@$VERSION failed; run \`make serve-client\` where the npm registry is reachable:" >&2
  grep -i -m3 "err" "$tmp/npm.log" >&2 || true
  exit 77
fi
tgz="$tmp/$NAME-$VERSION.tgz"
want_hex=$(echo "$SHA" | base64 -d | od -An -v -tx1 | tr -d ' \n')
got_hex=$(sha512sum "$tgz" | cut -d' ' -f1)
if [ "$got_hex" != "$want_hex" ]; then
  echo "serve-client: $NAME@$VERSION: integrity mismatch: sha512 $got_hex, pinned $want_hex" >&2
  exit 1
fi
mkdir -p "$tmp/x"
tar xzf "$tgz" -C "$tmp/x"
rm -rf "$dest"
mv "$tmp/x/package" "$dest"
echo "$want" > "$dest/.integrity"
