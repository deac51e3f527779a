#!/bin/sh
# tests/models/fetch.sh [DIR] - `make models`: the pretrained ESRGAN
# upscalers from npm (MIT, by UpscalerJS), pinned by version and npm
# integrity hash, unpacked into DIR/<name>/ (default build/models).
#
# Each package is fetched with `npm pack`, its tarball checked against the
# sha512 pinned here, then extracted.  A package already extracted from a
# checked tarball (DIR/<name>/.integrity holds the hash) is left alone, so
# the step is idempotent and offline once done.  Exit 77 when a package is
# missing and npm is not installed or cannot reach the registry (tests then
# skip with that reason); a tarball whose hash differs is an error.
set -eu
DIR=${1:-${BUILD:-build}/models}

# name version sha512 (base64, as `npm view NAME@VERSION dist.integrity`)
PACKAGES='
esrgan-slim 1.0.0 DXtwn5SE71+pZKluN/hGeLaZv6ZylyFQYSvMqU08kKCEA5Y9Q1cIIk4EvPTPZw8VqGi2C6F02c8OjhtId4BK2w==
esrgan-medium 1.0.0 Z8JnR87sgetPABKevasXST3FdnXhaoTu9zpXnu3KLaHYpYStVt0FD1VZS9c6jhSGMBC0H929gN9RbWl+MeisKA==
esrgan-thick 1.0.0 Xt7LAEa1WYVdU8teye1A2J3T2ylb3ihlU/x01x1ieM7zZh5FzTll6fwmeUC82mkztWloGZM65KdSEWOmhlXOdw==
'

mkdir -p "$DIR"
echo "$PACKAGES" | while read -r name version sha; do
  [ -n "$name" ] || continue
  dest="$DIR/$name"
  want="sha512-$sha"
  if [ -f "$dest/.integrity" ] && [ "$(cat "$dest/.integrity")" = "$want" ] &&
     [ -f "$dest/package.json" ]; then
    continue
  fi
  if ! command -v npm >/dev/null 2>&1; then
    echo "models: $name missing and npm is not installed (apt-get install npm)" >&2
    exit 77
  fi
  tmp=$(mktemp -d "$DIR/.fetch.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "models: npm pack @upscalerjs/$name@$version"
  if ! (cd "$tmp" && npm pack --loglevel=error "@upscalerjs/$name@$version") >"$tmp/npm.log" 2>&1; then
    # no registry (offline, a proxy's certificate): the model tests skip with this reason
    echo "models: npm pack @upscalerjs/$name@$version failed; run \`make models\` where the npm registry is reachable:" >&2
    grep -i -m3 "err" "$tmp/npm.log" >&2 || true
    exit 77
  fi
  tgz="$tmp/upscalerjs-$name-$version.tgz"
  # npm's integrity is base64 of the digest; sha512sum prints hex
  want_hex=$(echo "$sha" | base64 -d | od -An -v -tx1 | tr -d ' \n')
  got_hex=$(sha512sum "$tgz" | cut -d' ' -f1)
  if [ "$got_hex" != "$want_hex" ]; then
    echo "models: $name@$version: integrity mismatch: sha512 $got_hex, pinned $want_hex" >&2
    exit 1
  fi
  mkdir -p "$tmp/x"
  tar xzf "$tgz" -C "$tmp/x"
  rm -rf "$dest"
  mv "$tmp/x/package" "$dest"
  echo "$want" > "$dest/.integrity"
  rm -rf "$tmp"
  trap - EXIT
done
