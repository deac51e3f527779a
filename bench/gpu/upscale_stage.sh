#!/bin/sh
# upscale_stage.sh DEST - stages what bench/gpu/upscale_device.sh needs on a
# lent GPU machine into DEST (e.g. /work/main/.gl/h-upscale, carried with
# .gl/debs): stripped, xz-compressed build/lumen, build/lumen-spirv.bin and
# build/tests/test_vk_upload, the esrgan-thick package's x2 model with its
# definition (28 MB), and the bench scripts.  Run from the repository root
# after `make build/lumen build/tests/test_vk_upload`.
set -e
D=${1:?usage: upscale_stage.sh DEST}
mkdir -p "$D/build/tests" "$D/bench" "$D/models/esrgan-thick/models"
for b in lumen tests/test_vk_upload; do
  strip -o "/tmp/upscale_stage.$$" "build/$b"
  xz -c "/tmp/upscale_stage.$$" > "$D/build/$b.xz"
  rm -f "/tmp/upscale_stage.$$"
done
xz -c build/lumen-spirv.bin > "$D/build/lumen-spirv.bin.xz"
M=${LUMEN_MODELS:-build/models}/esrgan-thick
cp "$M/package.json" "$D/models/esrgan-thick/"
cp -r "$M/dist" "$D/models/esrgan-thick/"
cp -r "$M/models/x2" "$D/models/esrgan-thick/models/"
cp bench/gpu/upscale_folder.sh bench/gpu/upscale_model.lua bench/gpu/upscale_device.sh "$D/bench/"
du -sh "$D"
