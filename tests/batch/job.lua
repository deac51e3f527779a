-- job.lua - the test jobs of tests/batch/run.sh: the CPPN sample at a small
-- size (BATCH_PX, default 16), with an optional busy delay per image
-- (BATCH_DELAY_MS) so a run of 200 images lasts long enough to interrupt.
local here = debug.getinfo(1, "S").source:sub(2):match("^(.*)/[^/]*$") or "."
local spec = assert(loadfile(here .. "/../../samples/batch_cppn.lua"))(os.getenv("BATCH_PX") or "16", "8")
local delay = (tonumber(os.getenv("BATCH_DELAY_MS")) or 0) / 1000
local render = spec.render
spec.render = function(p)
  local t = os.clock()
  while os.clock() - t < delay do end
  return render(p)
end
return spec
