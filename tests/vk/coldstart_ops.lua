-- tests/vk/coldstart_ops.lua OUT - a few kernels on the first Vulkan device,
-- each one a pipeline of its own (conv, group norm, softmax, layer norm,
-- matmul, elementwise chains), some used by several nodes of one evaluation,
-- with an upload in the middle (recorded into the command stream); the
-- results go to OUT.  tests/vk_coldstart.sh runs it with and without compile
-- threads and across damaged and crashed caches: the bytes must not change.
local lm = require "lumen"
local dev
for _, d in ipairs(lm.devices()) do if d.backend == "vulkan" then dev = d.spec; break end end
if not dev then print("no Vulkan device"); os.exit(77) end
local x = lm.randn({1, 8, 16, 16}, {seed = 1}):to(dev)
local w = lm.randn({8, 8, 3, 3}, {seed = 2}):to(dev)
local y = lm.conv2d(x, w, nil, {padding = 1})
local g = lm.group_norm(y, 4)
local s = (g:reshape({8, 256}) * 0.5):softmax()
local up = lm.tensor({1, 2, 3, 4, 5, 6, 7, 8}):to(dev)    -- an upload between kernels
local l = lm.layer_norm(s:reshape({8, 256}) + up:reshape({8, 1}), {256})
local m = lm.matmul(l, l:transpose(1, 2))
local e = (m:exp() - m):sqrt() + g:mean()
local out = {conv = y, gn = g, sm = s, ln = l, mm = m, e = e}
for k, v in pairs(out) do out[k] = v:to("cpu"):eval() end
lm.save(arg[1], out)
print("coldstart_ops: ok on " .. dev)
