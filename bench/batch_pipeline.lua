-- batch_pipeline.lua [N [REPS [SIZE WIDTH LAYERS UP]]] - lm.batch pipelined
-- (job k+1 queued before job k is written) against serial = true and
-- against the model alone (render + lm.eval, nothing written), in one
-- process, in turn, REPS (5) times over N (16) jobs of
-- tests/batch/conv_job.lua; prints each one's seconds per image (median,
-- min-max) and the rates against the model alone.  Run it on the device
-- to measure: LUMEN_DEVICE=vulkan build/lumen bench/batch_pipeline.lua
-- (docs/BENCHMARKS.md, "lumen batch pipeline (lavapipe)").
local a = {...}
local N, REPS = tonumber(a[1]) or 16, tonumber(a[2]) or 5
local cfg = {a[3] or "128", a[4] or "8", a[5] or "2", a[6] or "8"}
local here = debug.getinfo(1, "S").source:sub(2):match("^(.*)/[^/]*$") or "."
local job = here .. "/../tests/batch/conv_job.lua"
local render = assert(loadfile(job))(table.unpack(cfg))
local dir = os.tmpname()
os.remove(dir)

local function batch(serial)
  local r = lm.batch{script = job, args = cfg, seeds = "1-" .. N, out = dir .. "/%05d.png",
                     manifest = "none", progress = "off", serial = serial}
  assert(r.made == N, "batch: not every image was made")
  os.execute("rm -rf '" .. dir .. "'")
  return r.seconds / N
end
local function model()
  local t0 = lm.clock()
  for s = 1, N do lm.eval(render({seed = s})) end
  return (lm.clock() - t0) / N
end

lm.eval(render({seed = 0}))   -- pipelines compiled before the first timing
local t = {model = {}, piped = {}, serial = {}}
for _ = 1, REPS do
  t.model[#t.model + 1] = model()
  t.piped[#t.piped + 1] = batch(false)
  t.serial[#t.serial + 1] = batch(true)
end
local function stats(v)
  table.sort(v)
  return v[(#v + 1) // 2], v[1], v[#v]
end
print(string.format("# %d jobs of conv_job.lua %s on %s, %d repetitions in turn", N,
  table.concat(cfg, " "), lm.device(), REPS))
local m = stats(t.model)
for _, k in ipairs{"model", "piped", "serial"} do
  local med, lo, hi = stats(t[k])
  print(string.format("%-7s %7.1f ms/image (%.1f-%.1f)  rate %.2fx the model alone's",
    k, med * 1000, lo * 1000, hi * 1000, m / med))
end
