-- batch_cppn.lua - a seed sweep for `lumen batch`: one CPPN image per seed
-- (a small random MLP of x, y and the radius, drawn from the seed).
--   build/lumen batch samples/batch_cppn.lua --seeds 1-64 -o 'out/cppn_%05d.png' \
--       --sheet out/sheet.png [--batch-size 8] [-- SIZE [WIDTH]]
-- SIZE: image side in pixels (default 256); WIDTH: hidden units (default 32).
-- Optional columns when run with --params: scale (zoom, default 3) and
-- depth (hidden layers, default 3).
--
-- It is batch-polymorphic: render_batch draws each job's weights from its
-- own seed and stacks them on a leading axis, so --batch-size N computes N
-- images in one evaluation and gives the same bytes as one at a time.
local lm = require "lumen"
local args = {...}
local SIZE = tonumber(args[1]) or 256
local WIDTH = tonumber(args[2]) or 32

-- [H*W, 4] inputs: x, y in [-1, 1], the radius and 1 (the first layer's bias)
local coords = (function()
  local x = lm.linspace(-1, 1, SIZE):reshape{1, SIZE}:broadcast_to{SIZE, SIZE}
  local y = lm.linspace(-1, 1, SIZE):reshape{SIZE, 1}:broadcast_to{SIZE, SIZE}
  local r = (x * x + y * y):sqrt()
  return lm.stack({x, y, r, lm.ones{SIZE, SIZE}}, 3):reshape{SIZE * SIZE, 4}:eval():keep()
end)()

-- the weights of one job: a list of matrices, all from its seed
local function weights(p)
  local depth, scale = p.depth or 3, p.scale or 3
  local ws, key = {}, p.seed * 1000
  ws[1] = lm.randn({4, WIDTH}, {seed = key}) * scale
  for l = 2, depth do ws[l] = lm.randn({WIDTH, WIDTH}, {seed = key + l}) * (2.5 / math.sqrt(WIDTH)) end
  ws[depth + 1] = lm.randn({WIDTH, 3}, {seed = key + 99}) * (2 / math.sqrt(WIDTH))
  return ws
end

-- h [..., H*W, 4] through the layers; ws[l] [..., in, out]
local function net(h, ws)
  for l = 1, #ws - 1 do h = h:matmul(ws[l]):tanh() end
  return h:matmul(ws[#ws]):sigmoid()
end

local function render(p)
  return net(coords, weights(p)):reshape{SIZE, SIZE, 3}:permute{3, 1, 2}
end

-- jobs of one depth only: stacking needs equal shapes
local function render_batch(ps)
  local per = {}
  for k, p in ipairs(ps) do per[k] = weights(p) end
  for k = 2, #ps do
    if #per[k] ~= #per[1] then error("render_batch: jobs of different depths in one batch") end
  end
  local ws = {}
  for l = 1, #per[1] do
    local col = {}
    for k = 1, #ps do col[k] = per[k][l] end
    ws[l] = lm.stack(col, 1)
  end
  local n = #ps
  local h = coords:reshape{1, SIZE * SIZE, 4}:broadcast_to{n, SIZE * SIZE, 4}
  return net(h, ws):reshape{n, SIZE, SIZE, 3}:permute{1, 4, 2, 3}
end

return {render = render, render_batch = render_batch}
