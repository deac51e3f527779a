-- train_fashion.lua - a class-conditional image generator trained in Lumen:
-- rectified flow (flow matching) on Debian's Fashion-MNIST with a small
-- UNet, AdamW, then an Euler ODE sampler writing a PNG grid, one row per
-- class.
--   build/lumen samples/train_fashion.lua [steps=500] [out=fashion_grid.png]
-- The recipe is fixed (seeds, batch 32, width 16 (110k parameters), lr 2e-3
-- with 100 warm-up steps and cosine decay to 1e-5, AdamW without weight
-- decay, gradient norm clipped at 1, 10% label dropout for classifier-free
-- guidance; sampler: 20 Euler steps, guidance 2), so a rerun gives the same
-- loss curve on the same machine (about 4 minutes on 2 busy cores here).
-- Weights go to samples/models/fashion_flow_w<width>.safetensors (or
-- FLOW_WEIGHTS); an existing file, such as the shipped weights, is replaced
-- only with FLOW_OVERWRITE=1.  With steps = 0 they are loaded from there
-- and only the sampler runs.
-- A larger recipe: FLOW_WIDTH=32 FLOW_BATCH=64 (438k parameters), 3000 steps.
local lm = require "lumen"
-- the model, its initialisation, loss and sampler (shared with fashion_batch.lua)
local flow = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "models/fashion_flow.lua")
local steps = tonumber(arg and arg[1]) or 500
local out = arg and arg[2] or "fashion_grid.png"
local D = "/usr/share/datasets/fashion-mnist/"
-- FLOW_BATCH / FLOW_WIDTH change the recipe (the shipped one is 32 / 16)
local B, C, NCLS = tonumber(os.getenv("FLOW_BATCH")) or 32, tonumber(os.getenv("FLOW_WIDTH")) or 16, flow.NCLS
local now = lm.clock   -- wall clock (os.clock adds up every thread's CPU time)
local WEIGHTS = os.getenv("FLOW_WEIGHTS") or flow.weights_path(C)
-- never replace weights unasked (the shipped ones, or an earlier run's):
-- say so before minutes of training, not after
local existing = io.open(WEIGHTS, "rb")
if existing and (tonumber(arg and arg[1]) or 500) > 0 and os.getenv("FLOW_OVERWRITE") ~= "1" then
  existing:close()
  error(WEIGHTS .. " exists (the shipped weights, or an earlier run's): set FLOW_WEIGHTS=path " ..
        "for your own, or FLOW_OVERWRITE=1 to replace it", 0)
end
if existing then existing:close() end
local P = flow.init(C)
local loss_fn = flow.loss

print(string.format("model: %d parameters", flow.count(P)))
if steps > 0 then
  local X = lm.data.load_idx(D .. "train-images-idx3-ubyte.gz"):reshape{-1, 1, 28, 28}
  local Y = lm.data.load_idx(D .. "train-labels-idx1-ubyte.gz"):astype("i64") + 1
  local lr = lm.optim.linear_warmup(100, lm.optim.cosine_decay(2e-3, steps, 1e-5))
  local opt = lm.optim.adamw{lr = lr, weight_decay = 0.0}
  local vg = lm.value_and_grad(loss_fn)
  local it, epoch, t0, avg = nil, 0, now(), nil
  for s = 1, steps do
    local xb, yb
    if it then xb, yb = it() end
    if not xb then
      epoch = epoch + 1
      it = lm.data.batches({X, Y}, B, {seed = epoch, drop_last = true})
      xb, yb = it()
    end
    local x1 = xb:astype("f32") / 127.5 - 1
    -- label dropout: 10% of the batch is trained as "no class"
    local drop = lm.rand({B}, {seed = 10 * s + 1}):lt(0.1)
    yb = lm.where(drop, NCLS + 1, yb)
    local x0 = lm.randn({B, 1, 28, 28}, {seed = 10 * s + 2})
    local t = lm.rand({B}, {seed = 10 * s + 3})
    local loss, g = vg(P, x1, yb, x0, t)
    g = lm.optim.clip_grad_norm(g, 1.0)
    opt:update(P, g)
    local l = loss:item()
    avg = avg and avg * 0.98 + l * 0.02 or l
    if s % 50 == 0 or s <= 3 then
      print(string.format("step %5d  loss %.4f  (avg %.4f)  lr %.2e  %.1f ex/s", s, l, avg, opt.lr,
        s * B / (now() - t0)))
    end
  end
  lm.optim.save(WEIGHTS, P)
  print("saved " .. WEIGHTS)
else
  lm.optim.load(WEIGHTS, P)
end

-- ---- Euler sampler with classifier-free guidance ----
local per = 8
local y = lm.arange(1, NCLS + 1):astype("i64"):reshape{NCLS, 1}:broadcast_to{NCLS, per}:reshape{-1}
local x = flow.sample(P, lm.randn({NCLS * per, 1, 28, 28}, {seed = 1234}), y,
                      {steps = tonumber(os.getenv("FLOW_STEPS")) or 20, guidance = 2.0})
local grid = lm.image.grid((x:clamp(-1, 1) + 1) / 2, {nrow = per, pad = 2})
lm.image.write_png(out, grid)
print("wrote " .. out)
