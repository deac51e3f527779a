-- compare_backends.lua - the same CPPN seeds (samples/cppn.lua) on the CPU
-- and on Vulkan: max-abs error and PSNR per seed through lm.compare, a
-- contact sheet of both, and a heat-map of where they differ.
--
--   build/lumen samples/compare_backends.lua [outdir] [first_seed] [count]
-- Environment: CMP_SIZE (image side, 256), CMP_DEVICE (the other device,
-- "vulkan").  Writes OUTDIR/compare_cpu.png, compare_vulkan.png (the sheets)
-- and compare_diff.png (black = equal, white = the largest difference).
-- Exits 1 if a seed differs by more than 1/255 or no Vulkan device exists.
local lm = require "lumen"

local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
local cppn = dofile(here .. "cppn.lua")

local outdir = arg and arg[1] or "."
local first = tonumber(arg and arg[2]) or 1
local count = tonumber(arg and arg[3]) or 4
local size = tonumber(os.getenv("CMP_SIZE")) or 256
local other = os.getenv("CMP_DEVICE") or "vulkan"

local found = false
for _, d in ipairs(lm.devices()) do
  if d.backend == other or d.spec == other then found = true end
end
if not found then
  io.stderr:write("compare_backends: no ", other, " device (lm.devices() lists none)\n")
  os.exit(1)
end

-- run one seed on a device; the result comes back to the CPU to compare
local function render(device, seed)
  lm.device(device)
  local img = cppn.generate{seed = seed, width = size, height = size}:eval()
  return img:to("cpu")
end

local cpu_imgs, other_imgs, worst = {}, {}, 0
print(string.format("%-6s %12s %12s %10s %8s", "seed", "max abs", "mae", "psnr dB", "ok"))
for seed = first, first + count - 1 do
  local a, b = render("cpu", seed), render(other, seed)
  -- the pictures are 8-bit in the end: hold the device within 1/255 of the CPU
  local r = lm.compare(b, a, {atol = 1 / 255, rtol = 0})
  print(string.format("%-6d %12.3g %12.3g %10.1f %8s", seed, r.max_abs, r.mae,
    r.psnr, tostring(r.ok)))
  cpu_imgs[#cpu_imgs + 1], other_imgs[#other_imgs + 1] = a, b
  if r.max_abs > worst then worst = r.max_abs end
  if not r.ok then worst = math.huge end
end
lm.device("cpu")

local sheet_cpu, sheet_other = lm.image.grid(cpu_imgs), lm.image.grid(other_imgs)
lm.image.write_png(outdir .. "/compare_cpu.png", sheet_cpu, {level = 6})
lm.image.write_png(outdir .. "/compare_" .. other:gsub(":", "") .. ".png", sheet_other,
  {level = 6})
local d = lm.image.diff(sheet_other, sheet_cpu, outdir .. "/compare_diff.png")
print(string.format("diff image: %s/compare_diff.png (max %.3g, mean %.3g)", outdir,
  d.max, d.mean))
if worst == math.huge then
  print("FAIL: " .. other .. " differs from the CPU by more than 1/255")
  os.exit(1)
end
print(string.format("worst max abs over %d seeds: %.3g", count, worst))
