-- l_optim.lua - lm.optim: SGD and AdamW with PyTorch's update rules,
-- learning-rate schedules, gradient clipping, saving/loading parameters and
-- optimiser state (safetensors), and lm.data's shuffled batches.
-- Parameter tables are nested Lua tables of tensors; an optimiser's update
-- builds the new tensors lazily, evaluates them together and puts them in
-- place of the old ones in the same table.
-- (this file is run in one chunk after l_grad.lua: its locals lm,
-- map_tree, check_opts and is_tensor are in scope)
local optim = {}
lm.optim = optim

-- flat "a.b.1" names for the tensors of a tree, in sorted order
local function flatten(tree, prefix, out)
  out = out or {}
  if is_tensor(tree) then out[prefix] = tree; return out end
  if type(tree) ~= "table" then return out end
  for k, v in pairs(tree) do
    local name = prefix and (prefix .. "." .. tostring(k)) or tostring(k)
    flatten(v, name, out)
  end
  return out
end
optim.flatten = flatten

-- calls fn(tbl, key, tensor, name) for every tensor leaf
local function each_leaf(tree, fn, prefix)
  for k, v in pairs(tree) do
    local name = prefix and (prefix .. "." .. tostring(k)) or tostring(k)
    if is_tensor(v) then fn(tree, k, v, name)
    elseif type(v) == "table" then each_leaf(v, fn, name) end
  end
end

local function lr_at(lr, step)
  if type(lr) == "function" then return lr(step) end
  return lr
end

local function check_num(fname, name, v, lo)
  if type(v) ~= "number" or v ~= v or (lo and v < lo) then
    error(fname .. ": " .. name .. " must be a number" .. (lo and (" >= " .. lo) or ""), 3)
  end
  return v
end

-- the common driver: rule(p, g, state, lr) -> new p (state fields updated)
local function make(fname, defaults, rule, opts)
  local o = check_opts(fname, opts, defaults)
  local self = {step = 0, state = {}, hp = {}}
  for k, v in pairs(defaults) do
    local val = o[k]
    if val == nil then val = v end
    self.hp[k] = val
  end
  if type(self.hp.lr) ~= "function" then check_num(fname, "lr", self.hp.lr, 0) end
  function self:update(params, grads)
    self.step = self.step + 1
    local lr = lr_at(self.hp.lr, self.step)
    self.lr = lr
    local gflat = flatten(grads)
    local news, outs = {}, {}
    each_leaf(params, function(tbl, k, p, name)
      local g = gflat[name]
      if not g then return end
      local st = self.state[name]
      if not st then st = {}; self.state[name] = st end
      local np = rule(self.hp, p, g, st, lr, self.step)
      news[#news + 1] = {tbl, k, np}
      outs[#outs + 1] = np
      for _, t in pairs(st) do if is_tensor(t) then outs[#outs + 1] = t end end
    end)
    lm.eval(table.unpack(outs))
    for _, e in ipairs(news) do e[1][e[2]] = e[3] end
    return params
  end
  function self:state_dict()
    local d = {}
    for name, st in pairs(self.state) do
      for k, t in pairs(st) do d[name .. "::" .. k] = t end
    end
    d["__step"] = lm.full({1}, self.step, {dtype = "i64"})
    return d
  end
  function self:load_state_dict(d)
    self.state = {}
    for key, t in pairs(d) do
      if key == "__step" then self.step = math.tointeger(t:item()) or self.step
      else
        local name, k = key:match("^(.*)::([^:]+)$")
        if name then
          self.state[name] = self.state[name] or {}
          self.state[name][k] = t
        end
      end
    end
  end
  return self
end

-- torch.optim.SGD
function optim.sgd(opts)
  return make("optim.sgd", {lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false},
    function(hp, p, g, st, lr)
      if hp.weight_decay ~= 0 then g = g + p * hp.weight_decay end
      if hp.momentum ~= 0 then
        if st.momentum_buffer then
          st.momentum_buffer = st.momentum_buffer * hp.momentum + g * (1 - hp.dampening)
        else
          st.momentum_buffer = g
        end
        if hp.nesterov then g = g + st.momentum_buffer * hp.momentum else g = st.momentum_buffer end
      end
      return p - g * lr
    end, opts)
end

-- torch.optim.AdamW (decoupled weight decay, bias corrections as PyTorch)
function optim.adamw(opts)
  return make("optim.adamw", {lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2},
    function(hp, p, g, st, lr, step)
      local b1, b2 = hp.beta1, hp.beta2
      if hp.weight_decay ~= 0 then p = p * (1 - lr * hp.weight_decay) end
      st.exp_avg = st.exp_avg and (st.exp_avg * b1 + g * (1 - b1)) or g * (1 - b1)
      st.exp_avg_sq = st.exp_avg_sq and (st.exp_avg_sq * b2 + g * g * (1 - b2)) or g * g * (1 - b2)
      local bc1 = 1 - b1 ^ step
      local bc2 = 1 - b2 ^ step
      local denom = st.exp_avg_sq:sqrt() / math.sqrt(bc2) + hp.eps
      return p - (st.exp_avg / denom) * (lr / bc1)
    end, opts)
end

-- ---- schedules: functions step (1-based) -> lr ----
function optim.cosine_decay(init, steps, final)
  final = final or 0
  return function(step)
    local t = math.min(step - 1, steps) / steps
    return final + (init - final) * 0.5 * (1 + math.cos(math.pi * t))
  end
end

function optim.step_decay(init, gamma, every)
  return function(step) return init * gamma ^ ((step - 1) // every) end
end

function optim.linear_warmup(steps, after)
  return function(step)
    local base = type(after) == "function" and after(step) or after
    if step <= steps then return base * step / steps end
    return base
  end
end

-- torch.nn.utils.clip_grad_norm_: returns the clipped tree and the norm
function optim.clip_grad_norm(grads, max_norm)
  check_num("optim.clip_grad_norm", "max_norm", max_norm, 0)
  local total = 0
  local sq = {}
  for _, g in pairs(flatten(grads)) do sq[#sq + 1] = (g:astype("f64") * g:astype("f64")):sum() end
  for _, s in ipairs(sq) do total = total + s:item() end
  local norm = math.sqrt(total)
  local coef = max_norm / (norm + 1e-6)
  if coef >= 1 then return grads, norm end
  return map_tree(grads, function(g) return g * coef end), norm
end

-- ---- saving and loading (safetensors) ----
function optim.save(path, params, opt)
  local t = {}
  for name, v in pairs(flatten(params)) do t["param." .. name] = v end
  if opt then for name, v in pairs(opt:state_dict()) do t["optim." .. name] = v end end
  lm.save(path, t)
end

-- fills params (same structure as saved) in place; loads opt's state
function optim.load(path, params, opt)
  local t = lm.load(path)
  each_leaf(params, function(tbl, k, p, name)
    local v = t["param." .. name]
    if not v then error("optim.load: " .. path .. " has no parameter " .. name, 3) end
    tbl[k] = v:astype(p.dtype):contiguous():eval()
  end)
  if opt then
    local d = {}
    for key, v in pairs(t) do
      local rest = key:match("^optim%.(.*)$")
      if rest then d[rest] = v:contiguous():eval() end
    end
    opt:load_state_dict(d)
  end
  return params
end

-- ---- data ----
local data = lm.data or {}
lm.data = data

-- a deterministic permutation of 1..n (xorshift64*, Fisher-Yates)
function data.permutation(n, seed)
  local s = (seed or 0) * 2654435761 + 88172645463325252
  local p = {}
  for i = 1, n do p[i] = i end
  for i = n, 2, -1 do
    s = s ~ (s << 13); s = s ~ (s >> 7); s = s ~ (s << 17)
    local j = (s >> 1) % i + 1
    p[i], p[j] = p[j], p[i]
  end
  return p
end

-- batches over tensors sharing their first axis: for x, y in data.batches({X, Y}, 64, {shuffle=, seed=}) do
function data.batches(tensors, batch, opts)
  if type(tensors) ~= "table" or not is_tensor(tensors[1]) then error("data.batches: want a list of tensors", 2) end
  if math.type(batch) ~= "integer" or batch < 1 then error("data.batches: batch must be a positive integer", 2) end
  opts = check_opts("data.batches", opts, {shuffle = true, seed = true, drop_last = true})
  local n = tensors[1].shape[1]
  local order
  if opts.shuffle == false then
    order = {}
    for i = 1, n do order[i] = i end
  else
    order = data.permutation(n, opts.seed or 0)
  end
  local at = 0
  return function()
    if at >= n or (opts.drop_last and at + batch > n) then return nil end
    local m = math.min(batch, n - at)
    local idx = {}
    for i = 1, m do idx[i] = order[at + i] end
    at = at + m
    local ix = lm.tensor(idx, "i64")
    local out = {}
    for i, t in ipairs(tensors) do out[i] = t:index_select(1, ix) end
    return table.unpack(out)
  end
end

optim.sgd = doc(optim.sgd, "lm.optim.sgd", "lm.optim.sgd{lr=0.01, momentum=0, dampening=0, weight_decay=0, nesterov=false}\n"
  .. "-> optimiser: torch.optim.SGD.  opt:update(params, grads) replaces the tensors of the (nested)\n"
  .. "params table by their updated values (evaluated); lr may be a function step -> lr.")
optim.adamw = doc(optim.adamw, "lm.optim.adamw", "lm.optim.adamw{lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=1e-2}\n"
  .. "-> optimiser: torch.optim.AdamW's update rule exactly (decoupled decay, bias corrections).")
optim.cosine_decay = doc(optim.cosine_decay, "lm.optim.cosine_decay", "lm.optim.cosine_decay(init, steps, [final=0]) -> schedule")
optim.step_decay = doc(optim.step_decay, "lm.optim.step_decay", "lm.optim.step_decay(init, gamma, every) -> schedule")
optim.linear_warmup = doc(optim.linear_warmup, "lm.optim.linear_warmup", "lm.optim.linear_warmup(steps, lr_or_schedule) -> schedule")
optim.clip_grad_norm = doc(optim.clip_grad_norm, "lm.optim.clip_grad_norm", "lm.optim.clip_grad_norm(grads, max_norm) -> grads, norm\n"
  .. "torch.nn.utils.clip_grad_norm_: scales every gradient by max_norm / (norm + 1e-6) when that is < 1.")
optim.save = doc(optim.save, "lm.optim.save", "lm.optim.save(path, params, [opt])\nParameters (param.<a.b.c>) and the "
  .. "optimiser's state (optim.<name>::<field>, optim.__step) as one safetensors file.")
optim.load = doc(optim.load, "lm.optim.load", "lm.optim.load(path, params, [opt]) -> params\nFills params (same structure "
  .. "as saved) and opt's state from lm.optim.save's file.")
optim.flatten = doc(optim.flatten, "lm.optim.flatten", "lm.optim.flatten(tree) -> {[\"a.b.1\"] = tensor}")
data.permutation = doc(data.permutation, "lm.data.permutation", "lm.data.permutation(n, seed) -> list\nA permutation of 1..n "
  .. "fixed by the seed (xorshift64*, Fisher-Yates): the same on every machine.")
data.batches = doc(data.batches, "lm.data.batches", "lm.data.batches({X, Y, ...}, batch, {shuffle=true, seed=0, drop_last=false})\n"
  .. "-> iterator of batches (rows picked along axis 1 of every tensor).")
