-- batch_overhead.lua OUTDIR [SIZE=128] [N=40] [REPS=4] - the runner's cost
-- per image: lm.batch over N CPPN images (samples/batch_cppn.lua) against a
-- bare loop of the same render + write_png, interleaved REPS times (the
-- fastest of each kept: the machine is shared).  Prints Markdown rows
-- (bench/batch.sh).
local out = assert(arg[1], "usage: batch_overhead.lua OUTDIR [SIZE] [N] [REPS]")
local size, n, reps = arg[2] or "128", tonumber(arg[3]) or 40, tonumber(arg[4]) or 4
local spec = assert(loadfile("samples/batch_cppn.lua"))(size)
local now = lm._batch.now
local bare, runner = math.huge, math.huge
local function run_bare(r)
  lm._batch.mkdirs(out .. "/bare" .. r)
  local t0 = now()
  for s = 1, n do
    lm.image.write_png(string.format("%s/bare%d/%05d.png", out, r, s), spec.render{seed = s})
  end
  bare = math.min(bare, now() - t0)
end
local function run_runner(r)
  local t0 = now()
  local res = lm.batch{render = spec.render, seeds = "1-" .. n, out = out .. "/run" .. r .. "/%05d.png",
                       progress = "off"}
  assert(res.made == n, "lm.batch made " .. res.made)
  runner = math.min(runner, now() - t0)
end
run_bare(0)   -- warm-up: caches, thread pool, allocator
bare = math.huge
for r = 1, reps do
  -- alternate which goes first, so a drifting machine load favours neither
  if r % 2 == 1 then run_bare(r); run_runner(r) else run_runner(r); run_bare(r) end
end
local pb, pr = bare / n * 1e3, runner / n * 1e3
print(string.format("| per image, %sx%s CPPN (%d images, best of %d) | %.2f ms | bare loop | %.2f ms | "
  .. "%.3fx (overhead %+.2f ms, %+.1f %%) |", size, size, n, reps, pr, pb, pb / pr, pr - pb, (pr - pb) / pb * 100))
