-- devices.lua - the test job (job.lua) on the CPU and on Vulkan, compared
-- as float images with lm.compare (docs/BATCH.md states the tolerance).
-- Prints one line per seed, "seed N ok MAX_ABS", or "no vulkan device".
local here = debug.getinfo(1, "S").source:sub(2):match("^(.*)/[^/]*$") or "."
local spec = assert(loadfile(here .. "/job.lua"))()
local vk
for _, d in ipairs(lm.devices()) do if d.backend == "vulkan" then vk = vk or d.spec end end
if not vk then print("no vulkan device"); return end
local cpu = {}
for s = 1, 4 do cpu[s] = spec.render({seed = s}):eval() end
lm.device(vk)
for s = 1, 4 do
  local r = lm.compare(spec.render({seed = s}), cpu[s], {atol = 1e-5, rtol = 0})
  print(string.format("seed %d %s %.3g", s, r.ok and "ok" or "DIFFERS", r.max_abs))
end
