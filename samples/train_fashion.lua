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
-- Weights go to samples/models/fashion_flow_w<width>.safetensors; with
-- steps = 0 they are loaded from there and only the sampler runs.
-- A larger recipe: FLOW_WIDTH=32 FLOW_BATCH=64 (438k parameters), 3000 steps.
local lm = require "lumen"
local steps = tonumber(arg and arg[1]) or 500
local out = arg and arg[2] or "fashion_grid.png"
local D = "/usr/share/datasets/fashion-mnist/"
local WEIGHTS
-- FLOW_BATCH / FLOW_WIDTH change the recipe (the shipped one is 32 / 16)
local B, C, NCLS = tonumber(os.getenv("FLOW_BATCH")) or 32, tonumber(os.getenv("FLOW_WIDTH")) or 16, 10
local now = lm.clock   -- wall clock (os.clock adds up every thread's CPU time)

WEIGHTS = os.getenv("FLOW_WEIGHTS") or string.format("samples/models/fashion_flow_w%d.safetensors", C)

-- ---- parameters (PyTorch's default initialisation: U(-1/sqrt(fan_in), ..)) ----
local seed = 0
local function uniform(shape, fan_in)
  seed = seed + 1
  local k = 1 / math.sqrt(fan_in)
  return (lm.rand(shape, {seed = seed}) * (2 * k) - k):eval()
end
local function conv(cin, cout, k)
  return {w = uniform({cout, cin, k, k}, cin * k * k), b = uniform({cout}, cin * k * k)}
end
local function lin(cin, cout) return {w = uniform({cout, cin}, cin), b = uniform({cout}, cin)} end
local function block(cin, cout)   -- GroupNorm-SiLU-conv twice, with the embedding added between
  return {n1 = {w = lm.ones{cin}, b = lm.zeros{cin}}, c1 = conv(cin, cout, 3), e = lin(4 * C, cout),
          n2 = {w = lm.ones{cout}, b = lm.zeros{cout}}, c2 = conv(cout, cout, 3),
          skip = cin ~= cout and conv(cin, cout, 1) or nil}
end
local P = {
  t1 = lin(C, 4 * C), t2 = lin(4 * C, 4 * C), cls = {w = uniform({NCLS + 1, 4 * C}, 1)},
  inp = conv(1, C, 3),
  d1 = block(C, C), down1 = conv(C, 2 * C, 3),           -- 28 -> 14
  d2 = block(2 * C, 2 * C), down2 = conv(2 * C, 2 * C, 3), -- 14 -> 7
  mid = block(2 * C, 2 * C),
  u2 = block(4 * C, 2 * C), u1 = block(3 * C, C),
  outn = {w = lm.ones{C}, b = lm.zeros{C}}, outc = conv(C, 1, 3),
}

local function count(t)
  local n = 0
  for _, v in pairs(lm.optim.flatten(t)) do n = n + v.size end
  return n
end

local function gn(p, x) return lm.group_norm(x, 8, p.w, p.b) end
local function cv(p, x, stride) return lm.conv2d(x, p.w, p.b, {stride = stride or 1, padding = (p.w.shape[3] - 1) // 2}) end
local function res(p, x, emb)
  local h = cv(p.c1, gn(p.n1, x):silu())
  h = h + lm.linear(emb, p.e.w, p.e.b):reshape{emb.shape[1], -1, 1, 1}
  h = cv(p.c2, gn(p.n2, h):silu())
  return h + (p.skip and cv(p.skip, x) or x)
end

-- v(x_t, t, class): class NCLS + 1 is "no class" (guidance)
local function model(p, x, t, y)
  local te = lm.timestep_embedding(t * 1000, C)
  local emb = lm.linear(lm.linear(te, p.t1.w, p.t1.b):silu(), p.t2.w, p.t2.b) + lm.embedding(y, p.cls.w)
  emb = emb:silu()
  local h0 = cv(p.inp, x)
  local h1 = res(p.d1, h0, emb)
  local h2 = res(p.d2, cv(p.down1, h1, 2), emb)
  local m = res(p.mid, cv(p.down2, h2, 2), emb)
  local u = lm.interpolate(m, {scale_factor = 2})
  u = res(p.u2, lm.concat({u, h2}, 2), emb)
  u = lm.interpolate(u, {scale_factor = 2})
  u = res(p.u1, lm.concat({u, h1}, 2), emb)
  return cv(p.outc, gn(p.outn, u):silu())
end

local function loss_fn(p, x1, y, x0, t)
  local tb = t:reshape{-1, 1, 1, 1}
  local xt = x0 * (1 - tb) + x1 * tb
  local v = model(p, xt, t, y)
  return (v - (x1 - x0)):square():mean()
end

print(string.format("model: %d parameters", count(P)))
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
local per, nsteps, scale = 8, tonumber(os.getenv("FLOW_STEPS")) or 20, 2.0
local y = lm.arange(1, NCLS + 1):astype("i64"):reshape{NCLS, 1}:broadcast_to{NCLS, per}:reshape{-1}
local ynull = lm.full({NCLS * per}, NCLS + 1, {dtype = "i64"})
local x = lm.randn({NCLS * per, 1, 28, 28}, {seed = 1234})
for i = 0, nsteps - 1 do
  local t = lm.full({NCLS * per}, i / nsteps)
  local vc, vu = model(P, x, t, y), model(P, x, t, ynull)
  x = (x + (vu + (vc - vu) * scale) * (1 / nsteps)):eval()
end
local grid = lm.image.grid((x:clamp(-1, 1) + 1) / 2, {nrow = per, pad = 2})
lm.image.write_png(out, grid)
print("wrote " .. out)
