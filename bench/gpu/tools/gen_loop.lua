-- gen_loop.lua DIR N OUTDIR [SIZE] [STEPS]: a user's one-at-a-time loop as
-- one process, the fair peer of `lumen batch samples/batch_generate.lua` at
-- process wall: the pipeline loaded, then for each job pipe:generate, the
-- image copied to the host and written as a PNG with its parameters text
-- (lm.image.write_png, the runner's writer), no warm-up left out.  The jobs
-- are batch_loop.sh's (prompt, negative, cfg 7, euler, seed = the job number;
-- SIZE 512 and STEPS 20 by default);
-- prints the load and each image's milliseconds (median [min-max], the
-- first apart)
local dir, n, out = arg[1], tonumber(arg[2] or 16), arg[3]
local size, steps = tonumber(arg[4] or 512), tonumber(arg[5] or 20)
local t0 = lm.clock()
local pipe = lm.models.load(dir)
local tl = lm.clock() - t0
os.execute("mkdir -p '" .. out .. "'")
local per = {}
local s = lm.clock()
for i = 1, n do
  local a = lm.clock()
  local img = pipe:generate{prompt = "a lighthouse on a cliff at dusk, oil painting", negative = "blurry",
                            steps = steps, cfg = 7, sampler = "euler", seed = i, size = size}:to("cpu"):eval()
  lm.image.write_png(string.format("%s/%d_%d.png", out, i, i), img[1],
    {text = {parameters = "a lighthouse on a cliff at dusk, oil painting\nNegative prompt: blurry\n" ..
             string.format("Steps: %d, Sampler: euler, CFG scale: 7, Seed: %d, Size: %dx%d", steps, i, size, size)}})
  per[i] = lm.clock() - a
end
local el = lm.clock() - s
local first = per[1]
local rest = {}
for i = 2, n do rest[#rest + 1] = per[i] end
table.sort(rest)
print(string.format("RESULT gen_loop: load %.2f s, %d images %.2f s (%.3f images/s after the load), first %.1f ms, "
  .. "the rest median %.1f ms [%.1f-%.1f]", tl, n, el, n / el, first * 1000, rest[(#rest + 1) // 2] * 1000,
  rest[1] * 1000, rest[#rest] * 1000))
