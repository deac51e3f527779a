-- batch_overhead.lua OUTDIR [SIZE=128] [N=40] [REPS=4] - the runner's cost
-- per image: lm.batch over N CPPN images (samples/batch_cppn.lua) against a
-- bare loop of the same render + write_png, interleaved REPS times, the
-- fastest of each kept (the machine is shared).  Wall time, and process CPU
-- time (all threads), which other sessions' load disturbs less.  Prints
-- Markdown rows (bench/batch.sh).
local out = assert(arg[1], "usage: batch_overhead.lua OUTDIR [SIZE] [N] [REPS]")
local size, n, reps = arg[2] or "128", tonumber(arg[3]) or 40, tonumber(arg[4]) or 4
local spec = assert(loadfile("samples/batch_cppn.lua"))(size)
local now = lm._batch.now
local best = {bare = {math.huge, math.huge}, runner = {math.huge, math.huge}}

local function timed(which, f)
  local w0, c0 = now(), os.clock()
  f()
  local b = best[which]
  b[1], b[2] = math.min(b[1], now() - w0), math.min(b[2], os.clock() - c0)
end
local function run_bare(r)
  lm._batch.mkdirs(out .. "/bare" .. r)
  timed("bare", function()
    for s = 1, n do
      lm.image.write_png(string.format("%s/bare%d/%05d.png", out, r, s), spec.render{seed = s})
    end
  end)
end
local function run_runner(r)
  timed("runner", function()
    local res = lm.batch{render = spec.render, seeds = "1-" .. n, out = out .. "/run" .. r .. "/%05d.png",
                         progress = "off"}
    assert(res.made == n, "lm.batch made " .. res.made)
  end)
end

run_bare(0)   -- warm-up: caches, thread pool, allocator
best.bare = {math.huge, math.huge}
for r = 1, reps do
  -- alternate which goes first, so a drifting machine load favours neither
  if r % 2 == 1 then run_bare(r); run_runner(r) else run_runner(r); run_bare(r) end
end
for k, what in ipairs{"wall", "CPU"} do
  local pb, pr = best.bare[k] / n * 1e3, best.runner[k] / n * 1e3
  print(string.format("| per image, %sx%s CPPN, %s time (%d images, best of %d) | %.2f ms | bare loop | %.2f ms | "
    .. "%.3fx (overhead %+.2f ms, %+.1f %%) |", size, size, what, n, reps, pr, pb, pb / pr, pr - pb, (pr - pb) / pb * 100))
end
