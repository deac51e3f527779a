-- batch.lua - a batch loop that makes and drops big tensors with flat
-- memory, a progress line and an honest exit code.
--   build/lumen samples/batch.lua [count]
local lm = require "lumen"
local n = tonumber(arg and arg[1]) or 50

local function render(i)
  -- 3 MiB per step: nothing here frees memory by hand
  local img = lm.rand({3, 512, 512}, {seed = i})
  local g = (img * 2 - 1):tanh():mean(1)
  return g:mean():item()
end

local total = 0
for i = 1, n do
  local ok, v = pcall(render, i)
  if not ok then
    io.stderr:write("\nstep ", i, " failed: ", tostring(v), "\n")
    os.exit(1)
  end
  total = total + v
  if i % 20 == 0 or i == n then
    io.write(string.format("\r%4d/%d  active %6.1f MiB  peak %6.1f MiB", i, n,
      lm.memory().active / 2^20, lm.memory().peak / 2^20))
    io.flush()
  end
end
io.write(string.format("\nmean of means: %.5f\n", total / n))
