-- rss.lua OUTDIR [N] - lm.batch over N (10,000) tiny 8x8 images; prints the
-- resident set size after job 100 and after the last one (tests/batch/run.sh).
local out, n = arg[1], tonumber(arg[2]) or 10000
local rss = {}
local r = lm.batch{
  seeds = "1-" .. n, out = out .. "/%05d.png", progress = "off",
  render = function(p)
    if p.seed == 100 or p.seed == n then
      rss[p.seed] = lm._batch.rss()
    end
    return lm.rand({3, 8, 8}, {seed = p.seed})
  end,
}
print(string.format("made %d failed %d rss100 %d rss%d %d", r.made, r.failed, rss[100], n, rss[n]))
