-- cppn.lua - a CPPN (compositional pattern-producing network): a small
-- network with random weights maps each pixel's coordinates (x, y and the
-- radius r) through a few tanh/sin layers to a colour.  The seed picks the
-- weights, so every seed is a different picture, at any resolution.
--
--   build/lumen samples/cppn.lua [seed] [out.png]
--   CPPN_SIZE=1024 build/lumen samples/cppn.lua 7 cppn7.png
--   LUMEN_DEVICE=vulkan build/lumen samples/cppn.lua
-- Environment: CPPN_SIZE (square side, 512), CPPN_WIDTH, CPPN_HEIGHT,
-- CPPN_DEPTH (hidden layers, 4), CPPN_HIDDEN (units per layer, 32),
-- CPPN_SCALE (zoom out: coordinates span -SCALE..SCALE, 1.0), CPPN_GAIN
-- (weight gain of the hidden layers: more is busier, 3.0), CPPN_SEED.
--
-- As a function of a seed: loaded from another script (dofile, loadfile) or
-- by `lumen batch`, this file renders nothing and returns
-- {generate = generate, render = generate}.  generate(params) takes seed,
-- width, height, depth, hidden, scale and gain (each optional, defaults from
-- the environment above; a width alone makes a square) and returns a lazy
-- f32 [3, height, width] image in 0..1, the same for the same params.
--   local cppn = dofile("samples/cppn.lua")
--   local img = cppn.generate{seed = 3, width = 256, height = 256}
--   CPPN_SIZE=256 build/lumen batch samples/cppn.lua --seeds 1-64 -o 'out/%03d.png'
local lm = require "lumen"

local function env_number(name, default)
  return tonumber(os.getenv(name)) or default
end
local size = env_number("CPPN_SIZE", 512)
local defaults = {
  seed = env_number("CPPN_SEED", 1),
  width = env_number("CPPN_WIDTH", size),
  height = env_number("CPPN_HEIGHT", size),
  depth = env_number("CPPN_DEPTH", 4),
  hidden = env_number("CPPN_HIDDEN", 32),
  scale = env_number("CPPN_SCALE", 1.0),
  gain = env_number("CPPN_GAIN", 3.0),
}

local function linear(h, fan_in, fan_out, seed, std)
  local w = lm.randn({fan_in, fan_out}, {seed = seed, std = std})
  local b = lm.randn({fan_out}, {seed = seed + 1, std = 0.5})
  return h:matmul(w) + b
end

local function generate(params)
  params = params or {}
  -- numbers or numeric strings (a params file's columns); else the default
  local function get(k) return tonumber(params[k]) or defaults[k] end
  local seed, depth, hidden, scale, gain =
    get("seed"), get("depth"), get("hidden"), get("scale"), get("gain")
  local W = get("width")
  local H = tonumber(params.height) or (tonumber(params.width) and W) or defaults.height

  -- pixel coordinates, the short side spanning -scale..scale
  local aspect = W / H
  local sx, sy = scale * math.max(aspect, 1), scale * math.max(1 / aspect, 1)
  local x = lm.linspace(-sx, sx, W):reshape{1, W}:broadcast_to{H, W}
  local y = lm.linspace(-sy, sy, H):reshape{H, 1}:broadcast_to{H, W}
  local r = (x * x + y * y):sqrt()
  local h = lm.stack({x, y, r}, 3):reshape{H * W, 3}

  -- each layer gets its own seeds; the first sets the spatial frequency
  local base = seed * 64
  h = linear(h, 3, hidden, base, 1.0):tanh()
  for i = 1, depth do
    local z = linear(h, hidden, hidden, base + 2 * i, gain / math.sqrt(hidden))
    h = (i % 2 == 1) and z:sin() or z:tanh()
  end
  local rgb = linear(h, hidden, 3, base + 2 * depth + 2, 2.0 / math.sqrt(hidden))
  return rgb:sigmoid():reshape{H, W, 3}:permute{3, 1, 2}
end

-- the script lumen runs has no Lua function above it on the stack; a file
-- loaded by dofile or loadfile from Lua (lumen batch too) has one
local function loaded_from_lua()
  for level = 3, math.huge do          -- 1: this function, 2: the file's chunk
    local info = debug.getinfo(level, "S")
    if not info then return false end
    if info.what ~= "C" then return true end
  end
end

if not loaded_from_lua() then
  local seed = tonumber(arg and arg[1]) or defaults.seed
  local out = arg and arg[2] or string.format("cppn_%d.png", seed)
  local img = generate{seed = seed}
  -- zlib level 6: a third smaller than the fast default, ~50 ms at 512x512
  lm.image.write_png(out, img, {level = 6, text = {seed = tostring(seed)}})
  print(string.format("%s  %dx%d  seed %d  device %s", out, defaults.width,
    defaults.height, seed, lm.device()))
end
return {generate = generate, render = generate}
