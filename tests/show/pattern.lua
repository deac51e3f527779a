-- tests/show/pattern.lua - the test pattern tests/show/check.py looks for:
-- 4x4 blocks, block (bx, by) of colour (40 + 60 bx, 40 + 60 by, 220 when
-- bx + by is odd, else 30).  dofile(...)(n, layout) -> an n x n image:
-- "HWC" as u8 pixel values, "CHW" as f32 in 0..1 (lm.save's two kinds).
local lm = require 'lumen'
return function(n, layout)
  local function colour(x, y)
    local bx, by = (x * 4) // n, (y * 4) // n
    return {40 + 60 * bx, 40 + 60 * by, (bx + by) % 2 == 1 and 220 or 30}
  end
  local t = {}
  if layout == 'HWC' then
    for y = 0, n - 1 do
      local row = {}
      for x = 0, n - 1 do row[x + 1] = colour(x, y) end
      t[y + 1] = row
    end
    return lm.tensor(t, {dtype = 'u8'})
  end
  for c = 1, 3 do
    local plane = {}
    for y = 0, n - 1 do
      local row = {}
      for x = 0, n - 1 do row[x + 1] = colour(x, y)[c] / 255 end
      plane[y + 1] = row
    end
    t[c] = plane
  end
  return lm.tensor(t, {dtype = 'f32'})
end
