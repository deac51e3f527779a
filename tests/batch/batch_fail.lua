-- batch_fail.lua - a batch-polymorphic script where seed 4 fails, alone or in
-- a batch (tests/batch/run.sh: only that job is recorded as failed).
local function check(p) if p.seed == 4 then error("seed 4 is bad") end end
return {
  render = function(p)
    check(p)
    return lm.rand({3, 8, 8}, {seed = p.seed})
  end,
  render_batch = function(ps)
    local imgs = {}
    for k, p in ipairs(ps) do check(p); imgs[k] = lm.rand({3, 8, 8}, {seed = p.seed}) end
    return lm.stack(imgs, 1)
  end,
}
