-- named.lua - a job with two named outputs (tests/batch/run.sh)
return {
  names = {"color", "gray"},
  render = function(p)
    local c = lm.rand({3, 8, 8}, {seed = p.seed})
    return {color = c, gray = c:mean(1)}
  end,
}
