-- fashion_batch.lua - Fashion-MNIST samples from the flow model trained by
-- samples/train_fashion.lua, one garment per job, for `lumen batch`:
--   build/lumen batch samples/fashion_batch.lua --params samples/fashion_grid.csv \
--       -o 'fashion/{class}_{seed}.png' --sheet fashion/sheet.png
--   build/lumen batch samples/fashion_batch.lua --seeds 1-40 -o 'fashion/%05d.png'
-- Parameters: seed (the starting noise) and class (0..9, Fashion-MNIST's
-- labels: 0 T-shirt, 1 trouser, 2 pullover, 3 dress, 4 coat, 5 sandal,
-- 6 shirt, 7 sneaker, 8 bag, 9 ankle boot); without a class column,
-- class = seed % 10.  Optional columns: steps (Euler steps, default 20),
-- guidance (default 2).  Script arguments: [SCALE=4 [WEIGHTS]]: each 28x28
-- sample is upscaled SCALE times (nearest), read from the shipped weights.
-- render_batch samples several jobs in one evaluation (--batch-size N).
local lm = require "lumen"
local flow = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "models/fashion_flow.lua")
local args = {...}
local SCALE = tonumber(args[1]) or 4
local P = flow.load(args[2] or flow.weights_path(16))
for _, v in pairs(lm.optim.flatten(P)) do v:keep() end

local function class_of(p)
  local c = p.class
  if c == nil or c == "" then c = p.seed % 10 end
  if type(c) ~= "number" or c ~= math.floor(c) or c < 0 or c >= flow.NCLS then
    error("fashion_batch: class must be an integer 0..9, got " .. tostring(c))
  end
  return c
end

-- [N,1,28,28] samples -> [N,1,28*SCALE,28*SCALE] in 0..1
local function picture(x)
  x = (x:clamp(-1, 1) + 1) / 2
  if SCALE ~= 1 then x = lm.interpolate(x, {scale_factor = SCALE, mode = "nearest"}) end
  return x
end

-- the jobs of one call share the number of steps and the guidance
local function render_batch(ps)
  local noise, ys = {}, {}
  for k, p in ipairs(ps) do
    noise[k] = lm.randn({1, 1, 28, 28}, {seed = p.seed})
    ys[k] = class_of(p) + 1
    if (p.steps or 20) ~= (ps[1].steps or 20) or (p.guidance or 2) ~= (ps[1].guidance or 2) then
      error("fashion_batch: jobs with different steps or guidance in one batch")
    end
  end
  local x0 = #ps == 1 and noise[1] or lm.concat(noise, 1)
  local y = lm.tensor(ys, {dtype = "i64"})
  return picture(flow.sample(P, x0, y, {steps = ps[1].steps, guidance = ps[1].guidance}))
end

return {
  render = function(p) return render_batch({p}):reshape{1, 28 * SCALE, 28 * SCALE} end,
  render_batch = render_batch,
}
