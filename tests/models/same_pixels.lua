-- same_pixels.lua A.png B.png [C.png D.png ...]: each pair's decoded pixels
-- equal (the same shape, no pixel off by a level); the PNGs' text may differ
-- (lumen batch writes its own parameters).  tests/models/batch_grid.sh.
local lm = require "lumen"
local args = {...}
if #args < 2 or #args % 2 == 1 then error("same_pixels.lua: give pairs of PNGs") end
for i = 1, #args, 2 do
  local a, b = lm.image.read_png(args[i]):astype("f32"), lm.image.read_png(args[i + 1]):astype("f32")
  local sa, sb = table.concat(a.shape, "x"), table.concat(b.shape, "x")
  if sa ~= sb then error(string.format("%s is %s, %s %s", args[i], sa, args[i + 1], sb)) end
  local d = (a - b):abs():max():item()
  if d ~= 0 then error(string.format("%s and %s differ (by up to %g levels)", args[i], args[i + 1], d)) end
end
