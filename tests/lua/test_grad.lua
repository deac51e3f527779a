-- test_grad.lua - lm.grad & co.: every backward rule against central
-- finite differences in f64, against PyTorch autograd (fixtures of
-- tests/ref/gen_grad.py), errors, and lm.optim against torch.optim.
local T, lm = ...
local test, eq, ok, raises, near = T.test, T.eq, T.ok, T.raises, T.near
local FX = "tests/ref/fixtures/grad/"

local seed = 100
local function rnd(shape, lo, hi)
  seed = seed + 1
  local r = lm.rand(shape, {seed = seed}):astype("f64")
  return r * ((hi or 1) - (lo or -1)) + (lo or -1)
end

local function flat(t) return t:reshape{-1}:totable() end

-- the loss sum(f(args) * R) and its gradient wrt each arg by central
-- differences, against lm.grad
local function fd_check(name, f, args, tol, h)
  local y = f(table.unpack(args))
  local R = rnd(y.shape)
  local function loss(...) return (f(...) * R):sum() end
  local nums = {}
  for i = 1, #args do nums[i] = i end
  local g = lm.grad(loss, {argnums = nums})(table.unpack(args))
  h = h or 1e-6
  local function at(i, x)
    local c = table.move(args, 1, #args, 1, {})
    c[i] = x
    return loss(table.unpack(c, 1, #args)):item()
  end
  for i, a in ipairs(args) do
    local v = flat(a)
    local ga = flat(g[i])
    for k = 1, #v do
      local old = v[k]
      v[k] = old + h
      local up = at(i, lm.tensor(v, "f64"):reshape(a.shape))
      v[k] = old - h
      local dn = at(i, lm.tensor(v, "f64"):reshape(a.shape))
      v[k] = old
      local num = (up - dn) / (2 * h)
      if math.abs(num - ga[k]) > (tol or 1e-5) * (1 + math.abs(num)) then
        error(string.format("%s: d/d arg %d [%d]: finite difference %.8g, grad %.8g", name, i, k, num, ga[k]), 2)
      end
    end
  end
end

local cases = {
  -- elementwise
  {"neg", function(x) return -x end, {{3, 4}}},
  {"abs", function(x) return x:abs() end, {{3, 4}}},
  {"exp", function(x) return x:exp() end, {{3, 4}}},
  {"log", function(x) return x:log() end, {{3, 4}}, 0.5, 2},
  {"log1p", function(x) return x:log1p() end, {{3, 4}}, 0, 2},
  {"expm1", function(x) return x:expm1() end, {{3, 4}}},
  {"sqrt", function(x) return x:sqrt() end, {{3, 4}}, 0.5, 2},
  {"rsqrt", function(x) return x:rsqrt() end, {{3, 4}}, 0.5, 2},
  {"square", function(x) return x:square() end, {{3, 4}}},
  {"reciprocal", function(x) return x:reciprocal() end, {{3, 4}}, 0.5, 2},
  {"sin", function(x) return x:sin() end, {{3, 4}}},
  {"cos", function(x) return x:cos() end, {{3, 4}}},
  {"tan", function(x) return x:tan() end, {{3, 4}}},
  {"tanh", function(x) return x:tanh() end, {{3, 4}}},
  {"sigmoid", function(x) return x:sigmoid() end, {{3, 4}}},
  {"relu", function(x) return x:relu() end, {{3, 4}}},
  {"gelu", function(x) return x:gelu() end, {{3, 4}}, -3, 3},
  {"gelu_tanh", function(x) return x:gelu_tanh() end, {{3, 4}}, -3, 3},
  {"silu", function(x) return x:silu() end, {{3, 4}}, -3, 3},
  {"softplus", function(x) return x:softplus() end, {{3, 4}}, -3, 3},
  {"erf", function(x) return x:erf() end, {{3, 4}}},
  {"clamp", function(x) return x:clamp(-0.5, 0.5) end, {{3, 4}}},
  {"astype", function(x) return x:astype("f32"):astype("f64") * 1 end, {{2, 3}}, nil, nil, 1e-3, 1e-3},
  {"add (broadcast)", function(a, b) return a + b end, {{3, 4}, {4}}},
  {"sub (broadcast)", function(a, b) return a - b end, {{3, 1}, {1, 4}}},
  {"mul (broadcast)", function(a, b) return a * b end, {{2, 3, 4}, {3, 1}}},
  {"div", function(a, b) return a / b end, {{3, 4}, {3, 4}}, 0.5, 2},
  {"pow", function(a, b) return a ^ b end, {{3, 4}, {3, 4}}, 0.5, 2},
  {"maximum", function(a, b) return lm.maximum(a, b) end, {{3, 4}, {3, 4}}},
  {"minimum", function(a, b) return lm.minimum(a, b) end, {{3, 4}, {4}}},
  {"atan2", function(a, b) return lm.atan2(a, b) end, {{3, 4}, {3, 4}}, 0.5, 2},
  {"hypot (broadcast)", function(a, b) return lm.hypot(a, b) end, {{3, 4}, {4}}, 0.5, 2},
  {"where", function(a, b) return lm.where(a:gt(0), a, b) end, {{3, 4}, {4}}},
  -- reductions
  {"sum", function(x) return x:sum(2) end, {{3, 4}}},
  {"sum all", function(x) return x:sum() end, {{3, 4}}},
  {"mean", function(x) return x:mean({1, 3}, true) end, {{2, 3, 4}}},
  {"max", function(x) return x:max(2) end, {{3, 4}}},
  {"min", function(x) return x:min(1) end, {{3, 4}}},
  {"prod", function(x) return x:prod(2) end, {{3, 4}}, 0.5, 2},
  {"logsumexp", function(x) return x:logsumexp(2) end, {{3, 4}}},
  {"var", function(x) return x:var(2) end, {{3, 4}}},
  {"std", function(x) return x:std(1) end, {{3, 4}}},
  {"cumsum", function(x) return x:cumsum(2) end, {{3, 4}}},
  -- views and indexing
  {"reshape", function(x) return x:reshape{4, 3} end, {{3, 4}}},
  {"transpose", function(x) return x:transpose(1, 2) * 1 end, {{3, 4}}},
  {"permute", function(x) return x:permute{3, 1, 2} * 1 end, {{2, 3, 4}}},
  {"slice step", function(x) return x[{{1, 3}, {1, 4, 2}}] * 1 end, {{3, 4}}},
  {"slice box", function(x) return x[{{2, 3}, {2, 4}}] * 1 end, {{3, 5}}},
  {"broadcast_to", function(x) return x:broadcast_to{3, 2, 4} * 1 end, {{2, 1}}},
  {"squeeze/unsqueeze", function(x) return x:unsqueeze(1):squeeze(1) * 1 end, {{3, 4}}},
  {"concat", function(a, b) return lm.concat({a, b}, 2) end, {{3, 2}, {3, 4}}},
  {"stack", function(a, b) return lm.stack({a, b}, 1) end, {{3, 4}, {3, 4}}},
  {"pad", function(x) return lm.pad(x, {1, 2, 0, 1}) end, {{3, 4}}},
  {"index_select", function(x) return x:index_select(1, lm.tensor({3, 1, 3}, "i64")) end, {{3, 4}}},
  {"embedding", function(w) return lm.embedding(lm.tensor({{2, 1}, {2, 4}}, "i64"), w) end, {{4, 3}}},
  -- linear algebra
  {"matmul", function(a, b) return a:matmul(b) end, {{3, 4}, {4, 2}}},
  {"matmul batched", function(a, b) return a:matmul(b) end, {{2, 3, 4}, {4, 2}}},
  {"matmul vector", function(a, b) return a:matmul(b) end, {{4}, {4, 2}}},
  {"linear", function(x, w, b) return lm.linear(x, w, b) end, {{2, 3}, {4, 3}, {4}}},
  -- neural-network ops
  {"softmax", function(x) return x:softmax(2) end, {{3, 4}}},
  {"log_softmax", function(x) return x:log_softmax(2) end, {{3, 4}}},
  {"layer_norm", function(x, w, b) return lm.layer_norm(x, {4}, w, b) end, {{3, 4}, {4}, {4}}},
  {"rms_norm", function(x, w) return lm.rms_norm(x, {4}, w, 1e-6) end, {{3, 4}, {4}}},
  {"group_norm", function(x, w, b) return lm.group_norm(x, 2, w, b) end, {{2, 4, 2, 2}, {4}, {4}}},
  {"group_norm 3-d, no affine", function(x) return lm.group_norm(x, 2) end, {{2, 4, 5}}},
  {"group_norm weight only", function(x, w) return lm.group_norm(x, 4, w) end, {{1, 4, 3, 2}, {4}}},
  {"conv2d", function(x, w, b) return lm.conv2d(x, w, b, {padding = 1}) end, {{2, 2, 4, 4}, {3, 2, 3, 3}, {3}}},
  {"conv2d stride 2", function(x, w) return lm.conv2d(x, w, nil, {stride = 2, padding = 1}) end,
   {{1, 2, 5, 5}, {2, 2, 3, 3}}},
  {"conv2d groups dilation", function(x, w) return lm.conv2d(x, w, nil, {groups = 2, dilation = 2}) end,
   {{1, 4, 5, 5}, {2, 2, 2, 2}}},
  {"conv2d dilation same", function(x, w) return lm.conv2d(x, w, nil, {padding = "same", dilation = {1, 2}}) end,
   {{1, 2, 5, 6}, {2, 2, 2, 3}}},
  {"conv1d", function(x, w) return lm.conv1d(x, w, nil, {padding = 1}) end, {{2, 2, 5}, {3, 2, 3}}},
  {"conv_transpose2d", function(x, w, b) return lm.conv_transpose2d(x, w, b, {stride = 2, padding = 1}) end,
   {{1, 2, 3, 3}, {2, 3, 3, 3}, {3}}},
  {"max_pool2d", function(x) return lm.max_pool2d(x, 2) end, {{1, 2, 4, 4}}},
  {"max_pool2d overlapping", function(x) return lm.max_pool2d(x, 3, {stride = 2, padding = 1}) end, {{1, 1, 5, 5}}},
  {"avg_pool2d", function(x) return lm.avg_pool2d(x, 2, {stride = 1}) end, {{1, 2, 3, 3}}},
  {"adaptive_avg_pool2d", function(x) return lm.adaptive_avg_pool2d(x, {2, 3}) end, {{1, 2, 5, 4}}},
  {"interpolate nearest", function(x) return lm.interpolate(x, {scale_factor = 2}) end, {{1, 2, 2, 3}}},
  {"interpolate bilinear", function(x) return lm.interpolate(x, {size = {3, 5}, mode = "bilinear"}) end, {{1, 1, 2, 3}}},
  {"attention", function(q, k, v) return lm.attention(q, k, v) end, {{1, 2, 3, 4}, {1, 2, 5, 4}, {1, 2, 5, 3}}, nil, nil, 2e-3, 1e-3},
  {"attention causal gqa", function(q, k, v) return lm.attention(q, k, v, nil, {causal = true}) end,
   {{1, 4, 3, 2}, {1, 2, 3, 2}, {1, 2, 3, 2}}, nil, nil, 2e-3, 1e-3},
  {"rope", function(x) return lm.rope(x, 4, {base = 100}) end, {{1, 3, 6}}},
  {"rope traditional", function(x) return lm.rope(x, 4, {traditional = true}) end, {{1, 3, 4}}},
  {"tril", function(x) return x:tril() end, {{3, 3}}},
}

for _, c in ipairs(cases) do
  test("grad of " .. c[1] .. " matches finite differences (f64)", function()
    local args = {}
    for i, shape in ipairs(c[3]) do args[i] = rnd(shape, c[4], c[5]) end
    fd_check(c[1], c[2], args, c[6], c[7])
  end)
end

-- ---- against PyTorch autograd (f32 inputs, f64 references) ----
local FXT
local function fx()
  FXT = FXT or lm.load(FX .. "grad.npz")
  return FXT
end

local function maxrel(a, b)
  local d = (a:astype("f64") - b:astype("f64")):abs():max():item()
  return d / (1 + b:astype("f64"):abs():max():item())
end

local ce_lbl = lm.tensor({2, 1, 4}, "i64")   -- PyTorch's {1, 0, 3}, 1-based
local torch_cases = {
  exp_tanh = function(x) return x:exp() * x:tanh() end,
  sigmoid_silu = function(x) return x:sigmoid() + x:silu() end,
  gelu = function(x) return x:gelu() + x:gelu_tanh() end,
  relu_abs = function(x) return x:relu() + x:abs() end,
  log_sqrt = function(x) return x:log() + x:sqrt() + x:rsqrt() end,
  broadcast = function(a, b) return a * b + a / (b:abs() + 1) - b end,
  pow = function(a, b) return a:abs() ^ b end,
  maximum = function(a, b) return lm.maximum(a, b) + lm.minimum(a, b * 2) end,
  where_clamp = function(a, b) return lm.where(a:gt(0), a, b) + a:clamp(-1, 1) end,
  reductions = function(x)
    return lm.concat({x:sum(2), x:mean(2), x:max(2), x:logsumexp(2), x:var(2, {ddof = 1})}, 1)
  end,
  views = function(x) return x:permute{3, 1, 2}:reshape{4, 6}[{{2, 3}, {1, 6, 2}}] * 2 end,
  matmul = function(a, b) return a:matmul(b) end,
  linear = function(x, w, b) return lm.linear(x, w, b) end,
  softmax = function(x) return x:softmax(2) * 3 + x:log_softmax(1) end,
  layer_norm = function(x, w, b) return lm.layer_norm(x, {4}, w, b) end,
  rms_norm = function(x, w) return lm.rms_norm(x, {4}, w, 1e-6) end,
  group_norm = function(x, w, b) return lm.group_norm(x, 2, w, b) end,
  conv2d = function(x, w, b) return lm.conv2d(x, w, b, {stride = 2, padding = 1}) end,
  conv_transpose2d = function(x, w, b)
    return lm.conv_transpose2d(x, w, b, {stride = 2, padding = 1, output_padding = 1})
  end,
  max_pool2d = function(x) return lm.max_pool2d(x, 2) end,
  avg_pool2d = function(x) return lm.avg_pool2d(x, 3, {stride = 2, padding = 1}) end,
  nearest = function(x) return lm.interpolate(x, {scale_factor = 2}) end,
  bilinear = function(x) return lm.interpolate(x, {size = {5, 4}, mode = "bilinear"}) end,
  sdpa = function(q, k, v) return lm.attention(q, k, v, nil, {causal = true}) end,
  embedding = function(w) return lm.embedding(lm.tensor({{3, 1}, {4, 3}}, "i64"), w) end,
  cross_entropy = function(x)
    return -(x:log_softmax(2) * lm.one_hot(ce_lbl, 4):astype("f32")):sum(2)
  end,
}

local names = {}
for k in pairs(torch_cases) do names[#names + 1] = k end
table.sort(names)
for _, name in ipairs(names) do
  test("grad of " .. name .. " matches PyTorch autograd (f32)", function()
    local t = fx()
    local args, nums = {}, {}
    while t[name .. ".in" .. (#args + 1)] do
      args[#args + 1] = t[name .. ".in" .. (#args + 1)]
      nums[#nums + 1] = #nums + 1
    end
    ok(#args > 0, "fixture has inputs")
    local R = t[name .. ".r"]
    local f = torch_cases[name]
    local g = lm.grad(function(...) return (f(...) * R):sum() end, {argnums = nums})(table.unpack(args))
    for i = 1, #args do
      local ref = t[name .. ".g" .. i]
      eq(table.concat(g[i].shape, "x"), table.concat(ref.shape, "x"), name .. " grad shape " .. i)
      local e = maxrel(g[i], ref)
      if e > 2e-5 then error(string.format("%s: grad %d differs from PyTorch by %.3g (relative)", name, i, e)) end
    end
  end)
end

-- ---- the API ----
test("grad of nested parameter tables keeps their structure", function()
  local p = {layers = {{w = lm.ones{2, 2}}, {w = lm.ones{2, 2} * 2}}, scale = lm.tensor(3.0), name = "m"}
  local g = lm.grad(function(p, x) return (x:matmul(p.layers[1].w):matmul(p.layers[2].w) * p.scale):sum() end)(
    p, lm.ones{1, 2})
  eq(g.name, "m")
  eq(g.layers[1].w.shape[1], 2)
  near(g.scale:item(), 16)
  near(g.layers[2].w:sum():item(), 4 * 3 * 2)
end)

test("value_and_grad returns the value, argnums picks arguments", function()
  local f = function(a, b) return (a * b):sum(), a + 1 end
  local v, g, aux = lm.value_and_grad(f, {argnums = {1, 2}})(lm.tensor{1, 2}, lm.tensor{3, 4})
  near(v:item(), 11)
  T.same(g[1]:totable(), {3, 4})
  T.same(g[2]:totable(), {1, 2})
  T.same(aux:totable(), {2, 3})
  local g2 = lm.grad(f, {argnums = 2})(lm.tensor{1, 2}, lm.tensor{3, 4})
  T.same(g2:totable(), {1, 2})
end)

test("vjp with explicit cotangents, stop_gradient", function()
  local ys, vj = lm.vjp(function(x) return x * x, x:sum() end, {lm.tensor{1, 2, 3}}, {lm.tensor{1, 0, 2}, 1})
  T.same(ys[1]:totable(), {1, 4, 9})
  T.same(vj[1]:totable(), {3, 1, 13})
  local g = lm.grad(function(x) return (lm.stop_gradient(x * 2) * x):sum() end)(lm.tensor{1, 2})
  T.same(g:totable(), {2, 4})
end)

test("non-differentiable ops and bad calls are errors naming them", function()
  raises(function() lm.grad(function(x) return x:argmax():astype("f32"):sum() end)(lm.tensor{1, 2}) end,
    "argmax")
  raises(function() lm.grad(function(x) return x:gt(1):astype("f32"):sum() end)(lm.tensor{1, 2}) end, "gt")
  raises(function() lm.grad(function(x) return x * 2 end)(lm.tensor{1, 2}) end, "scalar")
  raises(function() lm.grad(function(x) return x end, {argnum = 1}) end, "unknown option 'argnum'")
  raises(function() lm.grad(function(x) return x end, {}, 2) end, "lm.grad: too many arguments")
  raises(function() lm.optim.sgd({lr = 1}, 2) end, "lm.optim.sgd: too many arguments")
  raises(function() lm.grad(function(x) return x:sum() end, {argnums = 3})(lm.tensor{1}) end, "argnum 3")
end)

test("gradients need no graph after the step (live arrays come back down)", function()
  local w = lm.randn({8, 8}, {seed = 5})
  local vg = lm.value_and_grad(function(w, x) return (x:matmul(w):tanh()):sum() end)
  vg(w, lm.ones{2, 8})
  collectgarbage(); collectgarbage()
  local before = lm.live()
  for _ = 1, 5 do vg(w, lm.ones{2, 8}) end
  collectgarbage(); collectgarbage()
  ok(lm.live() <= before + 2, "live arrays " .. lm.live() .. " vs " .. before)
end)

test("lm.compile of a function calling lm.grad", function()
  local w = lm.randn({4, 3}, {seed = 9})
  local step = lm.compile(function(w, x) return lm.grad(function(w) return (x:matmul(w)):square():sum() end)(w) end)
  local x = lm.randn({2, 4}, {seed = 10})
  local g1 = step(w, x)
  local g0 = lm.grad(function(w) return (x:matmul(w)):square():sum() end)(w)
  ok(maxrel(g1, g0) < 1e-6, "compiled grad equals plain grad")
end)

-- ---- optimisers against torch.optim (3 steps on fixed gradients) ----
for _, c in ipairs{
  {"sgd", function() return lm.optim.sgd{lr = 0.1, momentum = 0.9, weight_decay = 0.01, dampening = 0.1} end},
  {"nesterov", function() return lm.optim.sgd{lr = 0.1, momentum = 0.9, nesterov = true} end},
  {"adamw", function() return lm.optim.adamw{lr = 0.01, beta1 = 0.8, beta2 = 0.95, eps = 1e-6, weight_decay = 0.1} end},
} do
  test("optim." .. c[1] .. " follows torch.optim step by step", function()
    local t = fx()
    local params = {p = t["optim.p0"]:astype("f64")}
    local opt = c[2]()
    for i = 1, 3 do
      opt:update(params, {p = t["optim.grad" .. i]:astype("f64")})
      local e = maxrel(params.p, t["optim." .. c[1] .. i])
      if e > 1e-12 then error(string.format("step %d differs from torch by %.3g", i, e)) end
    end
  end)
end

test("optim: unknown options are errors, schedules, clipping, save/load", function()
  raises(function() lm.optim.sgd{lr = 0.1, momentun = 0.9} end, "unknown option 'momentun'")
  local cos = lm.optim.cosine_decay(1.0, 10, 0.1)
  near(cos(1), 1.0); near(cos(11), 0.1); near(cos(6), 0.55)
  local warm = lm.optim.linear_warmup(4, 2.0)
  near(warm(1), 0.5); near(warm(10), 2.0)
  near(lm.optim.step_decay(1, 0.5, 2)(3), 0.5)
  local g, n = lm.optim.clip_grad_norm({a = lm.tensor{3, 0}, b = {lm.tensor{4}}}, 1)
  near(n, 5)
  near(g.a:totable()[1], 0.6, 1e-5)
  local params = {w = lm.tensor{1, 2}, sub = {b = lm.tensor{3}}}
  local opt = lm.optim.adamw{lr = 0.1}
  opt:update(params, {w = lm.tensor{1, 1}, sub = {b = lm.tensor{1}}})
  local path = os.tmpname() .. ".safetensors"
  lm.optim.save(path, params, opt)
  local p2 = {w = lm.zeros{2}, sub = {b = lm.zeros{1}}}
  local opt2 = lm.optim.adamw{lr = 0.1}
  lm.optim.load(path, p2, opt2)
  os.remove(path)
  T.same(p2.w:totable(), params.w:totable())
  eq(opt2.step, 1)
  opt:update(params, {w = lm.tensor{1, 1}, sub = {b = lm.tensor{1}}})
  opt2:update(p2, {w = lm.tensor{1, 1}, sub = {b = lm.tensor{1}}})
  T.same(p2.w:totable(), params.w:totable())
end)

test("data: seeded permutation and batches", function()
  local p1, p2 = lm.data.permutation(10, 3), lm.data.permutation(10, 3)
  T.same(p1, p2)
  local seen = {}
  for _, v in ipairs(p1) do seen[v] = true end
  for i = 1, 10 do ok(seen[i], "permutation holds " .. i) end
  local X = lm.arange(0, 10):reshape{10, 1}
  local n = 0
  for x in lm.data.batches({X}, 4, {seed = 1}) do n = n + 1; eq(x.shape[1], n < 3 and 4 or 2) end
  eq(n, 3)
  n = 0
  for x in lm.data.batches({X}, 4, {seed = 1, drop_last = true}) do n = n + 1 end
  eq(n, 2)
end)

-- ---- a short training run against PyTorch ----
test("30 SGD steps of an MLP on Fashion-MNIST follow PyTorch's losses", function()
  local D = "/usr/share/datasets/fashion-mnist/"
  local f = io.open(D .. "train-images-idx3-ubyte.gz")
  if not f then return end   -- dataset-fashion-mnist not installed
  f:close()
  local t = lm.load(FX .. "train_mlp.npz")
  local steps, B = 30, 16
  local X = lm.data.load_idx(D .. "train-images-idx3-ubyte.gz", steps * B):reshape{steps * B, 784}:astype("f32") / 255
  local Y = lm.data.load_idx(D .. "train-labels-idx1-ubyte.gz", steps * B):astype("i64") + 1
  local params = {w1 = t.w1, b1 = t.b1, w2 = t.w2, b2 = t.b2}
  local opt = lm.optim.sgd{lr = 0.1, momentum = 0.9}
  local function loss_fn(p, x, y)
    local h = lm.linear(x, p.w1, p.b1):relu()
    local logits = lm.linear(h, p.w2, p.b2)
    return -(logits:log_softmax(2) * lm.one_hot(y, 10):astype("f32")):sum() / x.shape[1]
  end
  local vg = lm.value_and_grad(loss_fn)
  local ref = t.losses:totable()
  for s = 1, steps do
    local x = X[{{(s - 1) * B + 1, s * B}}]
    local y = Y[{{(s - 1) * B + 1, s * B}}]
    local loss, g = vg(params, x, y)
    opt:update(params, g)
    near(loss:item(), ref[s], 1e-4, "loss at step " .. s)
  end
end)

test("conv2d's input gradient at stride 1 (a flipped-kernel conv, Winograd in f32) equals conv_transpose2d's", function()
  local x = lm.randn({2, 16, 9, 10}, {seed = 31})
  local w = lm.randn({24, 16, 3, 3}, {seed = 32}) * 0.1
  local g = lm.randn({2, 24, 9, 10}, {seed = 33})
  local dx = lm.grad(function(x) return (lm.conv2d(x, w, nil, {padding = 1}) * g):sum() end)(x)
  local ref = lm.conv_transpose2d(g, w, nil, {padding = 1})
  eq(table.concat(dx.shape, "x"), "2x16x9x10", "shape")
  ok(maxrel(dx, ref) < 1e-4, "flipped-kernel conv equals conv_transpose2d: " .. maxrel(dx, ref))
end)

-- dW[o,c,ky,kx] = sum over n, oy, ox of g[n,o,oy,ox] * xpad[n,c,oy*s+ky*d,ox*s+kx*d], by matmuls
local function conv_wgrad_ref(x, g, k, s, d, p)
  local N, C = x.shape[1], x.shape[2]
  local O, OH, OW = g.shape[2], g.shape[3], g.shape[4]
  local xp = lm.pad(x:astype("f64"), {0, 0, 0, 0, p, p, p, p})
  local g2 = g:astype("f64"):transpose(1, 2):reshape{O, -1}
  local cols = {}
  for ky = 0, k - 1 do for kx = 0, k - 1 do
    local xs = xp[{{}, {}, {ky * d + 1, ky * d + 1 + (OH - 1) * s, s}, {kx * d + 1, kx * d + 1 + (OW - 1) * s, s}}]
    cols[#cols + 1] = g2:matmul(xs:transpose(1, 2):reshape{C, -1}:transpose(1, 2))
  end end
  return lm.stack(cols, 3):reshape{O, C, k, k}
end

test("conv2d's weight gradient (a large-kernel conv on the CPU) equals its definition", function()
  for _, c in ipairs{{s = 1, d = 1, p = 1, H = 12, W = 11}, {s = 2, d = 1, p = 1, H = 13, W = 12},
                     {s = 1, d = 2, p = 2, H = 10, W = 9}, {s = 2, d = 1, p = 0, H = 9, W = 9},
                     {s = 1, d = 1, p = 1, H = 12, W = 12, O = 1}, {s = 1, d = 1, p = 1, H = 12, W = 12, N = 1}} do
    for _, dt in ipairs{"f32", "f64"} do
      local x = lm.randn({c.N or 2, 3, c.H, c.W}, {seed = 41}):astype(dt)
      local w = (lm.randn({c.O or 4, 3, 3, 3}, {seed = 42}) * 0.2):astype(dt)
      local y = lm.conv2d(x, w, nil, {stride = c.s, dilation = c.d, padding = c.p})
      local g = lm.randn(y.shape, {seed = 43}):astype(dt)
      local dw = lm.grad(function(w) return (lm.conv2d(x, w, nil, {stride = c.s, dilation = c.d, padding = c.p}) * g):sum() end)(w)
      local ref = conv_wgrad_ref(x, g, 3, c.s, c.d, c.p)
      local tol = dt == "f32" and 1e-5 or 1e-12
      ok(maxrel(dw, ref) < tol, string.format("%s stride %d dilation %d: %g", dt, c.s, c.d, maxrel(dw, ref)))
    end
  end
end)

test("lm.grad of a compiled function (fused elementwise chains) equals the plain one", function()
  local function f(x, w) return ((x * w):sin():exp() * x + w):tanh():sum() end
  local cf = lm.compile(f)
  local x, w = lm.randn({3, 4}, {seed = 21}), lm.randn({4}, {seed = 22})
  local g1 = lm.grad(cf, {argnums = {1, 2}})(x, w)
  local g0 = lm.grad(f, {argnums = {1, 2}})(x, w)
  ok(maxrel(g1[1], g0[1]) < 1e-5 and maxrel(g1[2], g0[2]) < 1e-5, "compiled and plain gradients agree")
end)
