-- bench/train_step.lua - a training step (forward, backward, optimiser) of
-- an MLP and a small conv net, timed in ms per step; bench/peer_train.py
-- times the same steps in PyTorch.  Run by bench/train.sh.
local lm = require "lumen"
local function init(shape, fan_in, seed)
  local k = 1 / math.sqrt(fan_in)
  return (lm.rand(shape, {seed = seed}) * (2 * k) - k):eval()
end

local function bench(name, params, loss_fn, x, y, steps)
  local vg = lm.value_and_grad(loss_fn)
  local opt = lm.optim.sgd{lr = 0.01, momentum = 0.9}
  for _ = 1, 3 do local _, g = vg(params, x, y); opt:update(params, g) end
  lm.sync()
  local t0 = lm.clock()   -- wall clock (os.clock adds up every thread's CPU time)
  for _ = 1, steps do local _, g = vg(params, x, y); opt:update(params, g) end
  lm.sync()
  local ms = (lm.clock() - t0) * 1000 / steps
  print(string.format("RESULT %s %.4g ms", name, ms))
end

local function xent(logits, y, n)
  return -(logits:log_softmax(2) * lm.one_hot(y, 10):astype("f32")):sum() / n
end

-- MLP 784-256-10, batch 128
local B = 128
local x = lm.rand({B, 784}, {seed = 1})
local y = (lm.rand({B}, {seed = 2}) * 10):floor():astype("i64") + 1
local mlp = {w1 = init({256, 784}, 784, 3), b1 = init({256}, 784, 4), w2 = init({10, 256}, 256, 5), b2 = init({10}, 256, 6)}
bench("train_mlp_784x256x10_b128", mlp, function(p, x, y)
  return xent(lm.linear(lm.linear(x, p.w1, p.b1):relu(), p.w2, p.b2), y, B)
end, x, y, 40)

-- conv net: conv 1->16 3x3, relu, pool 2, conv 16->32 3x3, relu, pool 2, linear 1568->10, batch 64
local Bc = 64
local xc = lm.rand({Bc, 1, 28, 28}, {seed = 7})
local yc = (lm.rand({Bc}, {seed = 8}) * 10):floor():astype("i64") + 1
local cnn = {c1 = init({16, 1, 3, 3}, 9, 9), b1 = init({16}, 9, 10), c2 = init({32, 16, 3, 3}, 144, 11),
             b2 = init({32}, 144, 12), w = init({10, 1568}, 1568, 13), b = init({10}, 1568, 14)}
bench("train_cnn_28x28_b64", cnn, function(p, x, y)
  local h = lm.max_pool2d(lm.conv2d(x, p.c1, p.b1, {padding = 1}):relu(), 2)
  h = lm.max_pool2d(lm.conv2d(h, p.c2, p.b2, {padding = 1}):relu(), 2)
  return xent(lm.linear(h:reshape{Bc, -1}, p.w, p.b), y, Bc)
end, xc, yc, 10)
