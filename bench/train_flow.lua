-- bench/train_flow.lua DIR [STEPS=12] - the training step of
-- samples/train_fashion.lua (the flow UNet, width 16, batch 32: forward,
-- lm.value_and_grad, gradient clipping, AdamW with the recipe's schedule),
-- timed in examples/s.  It writes the initial weights (DIR/init.safetensors)
-- and the batches it trains on (DIR/batches.safetensors: x1, y, x0, t per
-- step, Fashion-MNIST in the recipe's order) for bench/peer_train_flow.py,
-- which runs the same steps in PyTorch, and its losses (DIR/losses_lumen.txt).
-- A DIR that already holds batches.safetensors is trained on those (so a
-- machine without the dataset can run it; LUMEN_DEVICE=vulkan for the GPU).
-- The first 2 steps are not timed.  Run by bench/train_flow.sh.
local lm = require "lumen"
local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
local flow = dofile(here .. "../samples/models/fashion_flow.lua")
local DIR = assert(arg[1], "usage: train_flow.lua DIR [STEPS]")
local STEPS = tonumber(arg[2]) or 12
local B, C, NCLS, WARM = 32, 16, flow.NCLS, 2
local D = "/usr/share/datasets/fashion-mnist/"

local P = flow.init(C)
lm.optim.save(DIR .. "/init.safetensors", P)

-- the recipe's batches (train_fashion.lua: epoch 1's shuffle, label dropout,
-- noise, times), or those of an earlier run in DIR (a machine without the dataset)
local batches = {}
local f = io.open(DIR .. "/batches.safetensors")
if f then
  f:close()
  local saved = lm.load(DIR .. "/batches.safetensors")
  for s = 1, STEPS do
    local b = {saved["x1." .. s], saved["y." .. s], saved["x0." .. s], saved["t." .. s]}
    if not b[1] then error("train_flow.lua: " .. DIR .. "/batches.safetensors holds fewer than " .. STEPS .. " steps") end
    for k = 1, 4 do b[k] = b[k]:contiguous():eval() end
    batches[s] = b
  end
else
  local X = lm.data.load_idx(D .. "train-images-idx3-ubyte.gz"):reshape{-1, 1, 28, 28}
  local Y = lm.data.load_idx(D .. "train-labels-idx1-ubyte.gz"):astype("i64") + 1
  local it = lm.data.batches({X, Y}, B, {seed = 1, drop_last = true})
  local saved = {}
  for s = 1, STEPS do
    local xb, yb = it()
    local x1 = (xb:astype("f32") / 127.5 - 1):eval()
    local drop = lm.rand({B}, {seed = 10 * s + 1}):lt(0.1)
    local y = lm.where(drop, NCLS + 1, yb):eval()
    local x0 = lm.randn({B, 1, 28, 28}, {seed = 10 * s + 2}):eval()
    local t = lm.rand({B}, {seed = 10 * s + 3}):eval()
    batches[s] = {x1, y, x0, t}
    saved["x1." .. s], saved["y." .. s], saved["x0." .. s], saved["t." .. s] = x1, y, x0, t
  end
  lm.save(DIR .. "/batches.safetensors", saved)
end
collectgarbage()

local lr = lm.optim.linear_warmup(100, lm.optim.cosine_decay(2e-3, 500, 1e-5))
local opt = lm.optim.adamw{lr = lr, weight_decay = 0.0}
local vg = lm.value_and_grad(flow.loss)
local losses, t0 = {}, nil
for s = 1, STEPS do
  if s == WARM + 1 then lm.sync(); t0 = lm.clock() end
  local loss, g = vg(P, table.unpack(batches[s]))
  g = lm.optim.clip_grad_norm(g, 1.0)
  opt:update(P, g)
  losses[s] = loss:item()
end
lm.sync()
local rate = (STEPS - WARM) * B / (lm.clock() - t0)
local f = assert(io.open(DIR .. "/losses_lumen.txt", "w"))
for s = 1, STEPS do f:write(string.format("%d %.9g\n", s, losses[s])) end
f:close()
print(string.format("INFO flow UNet w%d (%d parameters), batch %d, %d timed steps after %d, device %s",
  C, flow.count(P), B, STEPS - WARM, WARM, lm.device()))
print(string.format("RESULT train_flow_unet_w16_b32 %.4g ex/s", rate))
