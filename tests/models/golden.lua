-- tests/models/golden.lua - every ESRGAN package and scale: the package's
-- own fixture through Lumen against the package's expected result
-- (assets/samples/<N>x/result.png, made by UpscalerJS on TensorFlow.js),
-- within +-1 in 8-bit units at every pixel of every channel.
--   lumen tests/models/golden.lua DEVICE [pkg:scale ...]
-- prints one line per case (max and mean difference, pixels off by one)
-- and ends with "N passed, N failed".
local device = arg[1] or "cpu"
local cases = {}
for i = 2, #arg do
  local p, s = arg[i]:match("^([%w-]+):(%d+)$")
  cases[#cases + 1] = {p, tonumber(s)}
end
if #cases == 0 then
  for _, p in ipairs{"esrgan-slim", "esrgan-medium", "esrgan-thick"} do
    for _, s in ipairs{2, 3, 4, 8} do cases[#cases + 1] = {p, s} end
  end
end

local dir = lm.models.dir()
local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

local passed, failed = 0, 0
for _, c in ipairs(cases) do
  local pkg, scale = c[1], c[2]
  local ref_path = ("%s/%s/assets/samples/%dx/result.png"):format(dir, pkg, scale)
  if not exists(("%s/%s/package.json"):format(dir, pkg)) then
    failed = failed + 1
    print(("FAIL %s: not in %s (make models)"):format(pkg, dir))
  elseif exists(ref_path) then
    local ok, err = pcall(function()
      local m <close> = lm.models.load(pkg, {scale = scale, device = device})
      local img = lm.image.read_png(("%s/%s/assets/fixture.png"):format(dir, pkg), {dtype = "f32"})
      local out = m:upscale(img)
      local ref = lm.image.read_png(ref_path):astype("f32")
      assert(out.shape[1] == ref.shape[1] and out.shape[2] == ref.shape[2] and
             out.shape[3] == ref.shape[3], "shape differs from the expected result")
      local q = (out:clamp(0, 1) * 255):round()
      local d = (q - ref):abs()
      local max, mean = d:max():item(), d:mean():item()
      local off = (d:gt(0)):astype("f32"):sum():item()
      local good = max <= 1
      print(("%s %-14s x%d  max %g  mean %.6f  off-by-one %d of %d  %s"):format(
        device, pkg, scale, max, mean, off, d.size, good and "ok" or "FAIL"))
      if not good then error("difference above 1") end
    end)
    if ok then passed = passed + 1 else
      failed = failed + 1
      print(("FAIL %s %s x%d: %s"):format(device, pkg, scale, tostring(err)))
    end
  end
end
print(("%d passed, %d failed"):format(passed, failed))
os.exit(failed == 0 and 0 or 1)
