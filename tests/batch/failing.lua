-- failing.lua - jobs that fail in different ways (tests/batch/run.sh):
-- seed 3 raises an error, seed 5 makes a NaN image (a failure with
-- --nan-check), seed 7 returns no tensor; the others are fine.  A busy
-- delay per job (BATCH_DELAY_MS) as job.lua's, so two runs overlap.
local delay = (tonumber(os.getenv("BATCH_DELAY_MS")) or 0) / 1000
return function(p)
  local t = os.clock()
  while os.clock() - t < delay do end
  if p.seed == 3 then error("seed 3 is bad") end
  if p.seed == 5 then return lm.full({3, 8, 8}, 0 / 0) end
  if p.seed == 7 then return 42 end
  return lm.rand({3, 8, 8}, {seed = p.seed})
end
