-- l_grad.lua - lm.grad, lm.value_and_grad, lm.vjp (embedded in lumen.so).
-- Arguments may be tensors or nested tables of tensors (a model's
-- parameters); gradients come back in the same structure.  f runs on fresh
-- leaves over the arguments' data, so its lazy graph reaches them; the graph
-- is dropped once values and gradients are evaluated together.
local lm = ...
local is_tensor, leaf, vjp_core, eval_list = lm.is_tensor, lm._grad_leaf, lm._vjp, lm._eval_list

local function check_opts(fname, opts, allowed)
  if opts == nil then return {} end
  if type(opts) ~= "table" then error(fname .. ": options must be a table, got " .. type(opts), 3) end
  for k in pairs(opts) do
    if allowed[k] == nil then
      -- the message of the C functions' options rule (lua/l_args.c)
      local known = {}
      for name in pairs(allowed) do known[#known + 1] = name end
      table.sort(known)
      error(fname .. ": unknown option '" .. tostring(k) .. "' (known: " .. table.concat(known, ", ") .. ")", 3)
    end
  end
  return opts
end

-- a copy of tree with every tensor t replaced by fn(t)
local function map_tree(x, fn, seen)
  if is_tensor(x) then return fn(x) end
  if type(x) ~= "table" then return x end
  seen = seen or {}
  if seen[x] then error("grad: a parameter table contains itself", 4) end
  seen[x] = true
  local r = {}
  for k, v in pairs(x) do r[k] = map_tree(v, fn, seen) end
  seen[x] = nil
  return setmetatable(r, getmetatable(x))
end

-- leaves for the chosen arguments: returns the new args and the leaf list
local function make_leaves(args, argnums)
  local leaves, index = {}, {}
  local new = table.move(args, 1, args.n, 1, {n = args.n})
  for _, i in ipairs(argnums) do
    new[i] = map_tree(args[i], function(t)
      local l = leaf(t)
      leaves[#leaves + 1] = l
      index[l] = #leaves
      return l
    end)
  end
  return new, leaves, index
end

local function argnums_of(fname, opts)
  local a = opts.argnums
  if a == nil then return {1}, true end
  if math.type(a) == "integer" then return {a}, true end
  if type(a) ~= "table" or #a == 0 then
    error(fname .. ": argnums must be an integer or a list of integers", 3)
  end
  for _, i in ipairs(a) do
    if math.type(i) ~= "integer" or i < 1 then error(fname .. ": argnums must hold positive integers", 3) end
  end
  return a, false
end

local function value_and_grad_impl(fname, f, opts)
  if type(f) ~= "function" and not (getmetatable(f) or {}).__call then
    error(fname .. ": f must be a function", 3)
  end
  opts = check_opts(fname, opts, {argnums = true})
  local argnums, single = argnums_of(fname, opts)
  return function(...)
    local args = table.pack(...)
    for _, i in ipairs(argnums) do
      if i > args.n then error(fname .. ": argnum " .. i .. " but only " .. args.n .. " arguments", 2) end
    end
    local new, leaves, index = make_leaves(args, argnums)
    local outs = table.pack(f(table.unpack(new, 1, new.n)))
    local y = outs[1]
    if not is_tensor(y) then error(fname .. ": f must return a tensor (the value) first", 2) end
    if y.size ~= 1 then
      error(fname .. ": f must return a scalar (one element), got shape [" .. table.concat(y.shape, ", ")
            .. "] (" .. y.size .. " elements)", 2)
    end
    local g = vjp_core({y}, {lm.full(y.shape, 1, {dtype = y.dtype})}, leaves)
    local all = {y}
    for _, t in ipairs(g) do all[#all + 1] = t end
    eval_list(all)
    local grads = {}
    for j, i in ipairs(argnums) do
      grads[j] = map_tree(new[i], function(l) return index[l] and g[index[l]] or l end)
    end
    if single then return y, grads[1], table.unpack(outs, 2, outs.n) end
    return y, grads, table.unpack(outs, 2, outs.n)
  end
end

-- extra positional arguments are errors: lm._set_doc (below) wraps each
-- function in a check against its docstring's signature
function lm.value_and_grad(f, opts)
  return value_and_grad_impl("value_and_grad", f, opts)
end

function lm.grad(f, opts)
  local vg = value_and_grad_impl("grad", f, opts)
  return function(...)
    local _, g = vg(...)
    return g
  end
end

-- lm.vjp(f, primals, cotangents) -> outputs, vjps
function lm.vjp(f, primals, cotangents)
  if type(primals) ~= "table" or type(cotangents) ~= "table" then
    error("vjp: primals and cotangents must be lists", 2)
  end
  local args = table.pack(table.unpack(primals))
  local nums = {}
  for i = 1, args.n do nums[i] = i end
  local new, leaves, index = make_leaves(args, nums)
  local outs = table.pack(f(table.unpack(new, 1, new.n)))
  if outs.n ~= #cotangents then
    error("vjp: f returned " .. outs.n .. " values but " .. #cotangents .. " cotangents were given", 2)
  end
  local ys, cs = {}, {}
  for i = 1, outs.n do
    if not is_tensor(outs[i]) then error("vjp: output " .. i .. " is not a tensor", 2) end
    ys[i] = outs[i]
    cs[i] = is_tensor(cotangents[i]) and cotangents[i] or lm.full(outs[i].shape, cotangents[i], {dtype = outs[i].dtype})
  end
  local g = vjp_core(ys, cs, leaves)
  local all = {}
  for _, t in ipairs(ys) do all[#all + 1] = t end
  for _, t in ipairs(g) do all[#all + 1] = t end
  eval_list(all)
  local vjps = {}
  for i = 1, args.n do vjps[i] = map_tree(new[i], function(l) return index[l] and g[index[l]] or l end) end
  return ys, vjps
end

local doc = lm._set_doc
lm.grad = doc(lm.grad, "lm.grad", "lm.grad(f, {argnums=1}) -> function\n"
  .. "A function returning the gradient of f (which must return a one-element tensor first) with\n"
  .. "respect to argument argnums (an integer, or a list: then a list of gradients).  Arguments may be\n"
  .. "tensors or nested tables of tensors; gradients come back in the same structure.  f must not\n"
  .. "evaluate what the result depends on (an evaluated tensor drops its graph).")
lm.value_and_grad = doc(lm.value_and_grad, "lm.value_and_grad", "lm.value_and_grad(f, {argnums=1}) -> function\n"
  .. "Like lm.grad, but the function returns f's value, the gradients, then f's other results.\n"
  .. "Value and gradients are evaluated together.")
lm.vjp = doc(lm.vjp, "lm.vjp", "lm.vjp(f, primals, cotangents) -> outputs, vjps\n"
  .. "Runs f(table.unpack(primals)) and pulls the cotangents (tensors or numbers, one per output)\n"
  .. "back to every primal: vjps[i] has primals[i]'s structure.")
