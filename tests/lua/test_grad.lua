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
  {"conv2d", function(x, w, b) return lm.conv2d(x, w, b, {padding = 1}) end, {{2, 2, 4, 4}, {3, 2, 3, 3}, {3}}},
  {"conv2d stride 2", function(x, w) return lm.conv2d(x, w, nil, {stride = 2, padding = 1}) end,
   {{1, 2, 5, 5}, {2, 2, 3, 3}}},
  {"conv2d groups dilation", function(x, w) return lm.conv2d(x, w, nil, {groups = 2, dilation = 2}) end,
   {{1, 4, 5, 5}, {2, 2, 2, 2}}},
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
