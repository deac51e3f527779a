-- bench/cpu/first_call.lua DIR REF [CALLS] - where Lumen's first UNet call of a
-- process spends the time the next ones do not: loads bench/cpu/sd15_cpu*.py's
-- SD 1.5 folder DIR on the CPU in f32, profiles CALLS UNet calls (3 by
-- default) at REF's inputs by op and kernel (lm.profile, by="kernel"), prints
-- each call's wall time and the rows whose total differs most between the
-- first call and the median of the others, and the host rows (allocations),
-- with the page faults of each call (/proc/self/stat's minflt and majflt).
-- SIDE (optional) runs the call at a SIDE x SIDE latent (random inputs)
-- instead of REF's.
local lm = require "lumen"
local dir, refpath, calls, side = arg[1], arg[2], tonumber(arg[3] or "3"), tonumber(arg[4] or "0")
local function faults()
  local f = io.open("/proc/self/stat")
  local s = f and f:read("a") or ""
  if f then f:close() end
  local fields = {}
  for w in s:gsub("^.*%) ", ""):gmatch("%S+") do fields[#fields + 1] = w end
  return tonumber(fields[8] or "0"), tonumber(fields[10] or "0")   -- minflt, majflt
end
local function load_avg()
  local f = io.open("/proc/loadavg")
  local s = f and f:read("l") or "?"
  if f then f:close() end
  return s:match("^(%S+)") or "?"
end
local t0 = lm.clock()
local pipe = lm.models.load(dir, {dtype = "f32", device = "cpu"})
print(string.format("load %.1f s, load average %s", lm.clock() - t0, load_avg()))
local R = lm.load(refpath)
local x, t, ctx = R.x:eval(), R.t:eval(), R.ctx:eval()
if side > 0 then x = lm.randn({2, 4, side, side}, {seed = 5}):eval() end
local profs, walls = {}, {}
for i = 1, calls do
  local f0, j0 = faults()
  local s = lm.clock()
  local _, prof = lm.profile({print = false, by = "kernel"}, function() return pipe.unet(x, t, ctx) end)
  walls[i] = (lm.clock() - s) * 1000
  profs[i] = prof
  local f1, j1 = faults()
  print(string.format("call %d: wall %.1f ms, profiled %.1f ms, %d minor and %d major page faults, load average %s",
                      i, walls[i], prof.total_ms, f1 - f0, j1 - j0, load_avg()))
  io.stdout:flush()
end
local function key(r) return r.op .. " " .. (r.kernel or "") .. " " .. (r.dtype or "") end
local rows, order = {}, {}
for i, p in ipairs(profs) do
  for _, r in ipairs(p) do
    local k = key(r)
    if not rows[k] then rows[k] = {}; order[#order + 1] = k end
    rows[k][i] = (rows[k][i] or 0) + r.total_ms
    rows[k].count = r.count
    rows[k].timer = r.timer
  end
end
local function median(v)
  local s = {}
  for i = 2, calls do s[#s + 1] = v[i] or 0 end
  table.sort(s)
  return s[(#s + 1) // 2] or 0
end
table.sort(order, function(a, b) return (rows[a][1] or 0) - median(rows[a]) > (rows[b][1] or 0) - median(rows[b]) end)
print(string.format("%-48s %6s %10s %10s %10s", "op kernel dtype", "count", "first ms", "next ms", "diff ms"))
local sum = 0
for n, k in ipairs(order) do
  local d = (rows[k][1] or 0) - median(rows[k])
  sum = sum + d
  if n <= 25 or k:find("alloc") or k:find("upload") then
    print(string.format("%-48s %6d %10.1f %10.1f %10.1f", k:sub(1, 48), rows[k].count or 0, rows[k][1] or 0,
                        median(rows[k]), d))
  end
end
print(string.format("sum of differences %.1f ms; wall first %.1f, next %s", sum, walls[1],
                    table.concat(walls, " ", 2)))
