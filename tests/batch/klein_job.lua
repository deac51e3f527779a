-- klein_job.lua MODEL - FLUX.2-klein's tiny fixture (tests/ref/dit/klein)
-- through lm.batch as samples/batch_generate.lua runs a pipeline (prompts,
-- seeds, a batch in one call); its 3-layer test encoder has no layer 9,
-- so the text layers are given (tests/batch/timeline.sh)
local lm = require "lumen"
local MODEL = ...
local pipe = lm.models.load(MODEL)
local function render_batch(ps)
  local prompts, seeds = {}, {}
  for i, p in ipairs(ps) do prompts[i], seeds[i] = tostring(p.prompt or ""), p.seed end
  return pipe:generate{prompt = prompts, seed = seeds, batch = #ps, steps = ps[1].steps or 2,
                       size = ps[1].size, text_layers = {1, 2}, max_sequence_length = 16}
end
return {render = function(p) return render_batch({p})[1] end, render_batch = render_batch}
