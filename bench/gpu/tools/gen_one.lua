-- gen_one.lua DIR N: one-at-a-time pipe:generate (as a user's loop), images/s
-- after a warm-up image; each image evaluated and copied to the host
local dir, n = arg[1], tonumber(arg[2] or 16)
local t0 = lm.clock()
local pipe = lm.models.load(dir)
local tl = lm.clock() - t0
local function gen(seed)
  return pipe:generate{prompt = "a lighthouse on a cliff at dusk, oil painting", negative = "blurry",
                       steps = 20, cfg = 7, sampler = "euler", seed = seed, size = 512}:to("cpu"):eval()
end
gen(100)
local per = {}
local s = lm.clock()
for i = 1, n do local a = lm.clock(); gen(i); per[i] = lm.clock() - a end
local el = lm.clock() - s
table.sort(per)
print(string.format("RESULT pipe_generate_one_at_a_time: load %.2f s, %d images %.2f s = %.3f images/s, per image median %.1f ms [%.1f-%.1f]",
  tl, n, el, n / el, per[(n + 1) // 2] * 1000, per[1] * 1000, per[n] * 1000))
