-- test_indices.lua - every op that takes an index tensor (lua/l_indices.c)
-- gives the same answer for an index that is evaluated, lazy, a strided
-- view, on the Vulkan device (when there is one) or a compile placeholder;
-- 0 and out-of-range values are errors in Lua's numbering (1-based values,
-- positions and axes), never a silent wrong answer.  Before l_indices.c, a
-- lazy u8 index of 0 gave one_hot's class 1, and a lazy 0 for
-- index_select said "index -9223372036854775808 out of range for axis 0".
local T, lm = ...
local test, eq, ok, raises, same = T.test, T.eq, T.ok, T.raises, T.same

local has_vk = false
for _, d in ipairs(lm.devices()) do if d.backend == "vulkan" then has_vk = true end end

-- the ways an index reaches an op
local kinds = {
  evaluated = function(v, dt) return lm.tensor(v, {dtype = dt}) end,
  lazy = function(v, dt) return lm.tensor(v, {dtype = dt}) + 0 end,
  lazy_chain = function(v, dt)   -- arithmetic in the index's own dtype
    local up = {}
    for i, x in ipairs(v) do up[i] = x + 1 end
    return lm.tensor(up, {dtype = dt}) - 1
  end,
  view = function(v, dt)          -- column 1 of an [n, 2] tensor: strided
    local rows = {}
    for i, x in ipairs(v) do rows[i] = {x, 7} end
    local t = lm.tensor(rows, {dtype = dt})[{{}, 1}]
    return t
  end,
}
if has_vk then
  kinds.device = function(v, dt) return lm.tensor(v, {dtype = dt, device = "vulkan"}) + 0 end
end

local x2 = lm.arange(1, 21):reshape{5, 4}
local w = lm.arange(1, 16):reshape{5, 3}
-- op name -> {f = function(idx), n = size of the indexed axis, axis = for messages}
local ops = {
  one_hot = {f = function(i) return lm.one_hot(i, 5) end, n = 5},
  index_select = {f = function(i) return x2:index_select(1, i) end, n = 5, axis = 1},
  index_select_axis2 = {f = function(i) return x2:index_select(2, i) end, n = 4, axis = 2,
                        name = "index_select"},
  index_select_last = {f = function(i) return x2:index_select(-1, i) end, n = 4, axis = 2,
                       name = "index_select"},
  ["t[idx]"] = {f = function(i) return x2[i] end, n = 5, axis = 1, name = "index"},
  ["t[{{}, idx}]"] = {f = function(i) return x2[{{}, i}] end, n = 4, axis = 2, name = "index"},
  take_along_axis = {f = function(i) return lm.arange(1, 6):take_along_axis(i, 1) end, n = 5,
                     axis = 1},
  scatter = {f = function(i) return lm.zeros{5}:scatter(1, i, lm.arange(1, i.shape[1] + 1):astype("f32")) end,
             n = 5},
  scatter_add = {f = function(i) return lm.zeros{5}:scatter_add(1, i, 1) end, n = 5},
  embedding = {f = function(i) return lm.embedding(i, w) end, n = 5},
}

local good = {2, 1, 4, 4}
local good_neg = {2, -1, 1, -5}

local function vals(t) return t:to("cpu"):totable() end

for opname, op in pairs(ops) do
  local fname = op.name or opname
  local n = op.n
  for dt, values in pairs({u8 = good, i32 = good_neg, i64 = good_neg}) do
    if n < 5 then values = dt == "u8" and {2, 1, 4, 4} or {2, -1, 1, -4} end
    local ref = vals(op.f(lm.tensor(values, {dtype = dt})))
    for kind, make in pairs(kinds) do
      test(opname .. " " .. kind .. " " .. dt .. " index gives the evaluated index's result", function()
        same(vals(op.f(make(values, dt))), ref, opname .. " " .. kind)
      end)
      test(opname .. " " .. kind .. " " .. dt .. " index 0 is an error in Lua's numbering", function()
        local v = {1, 0, 2}
        raises(function() op.f(make(v, dt)) end, fname .. ": index 0 at position 2")
      end)
      test(opname .. " " .. kind .. " " .. dt .. " index past the end is an error", function()
        local v = {1, 2, n + 1}
        local msg = string.format("%s: index %d at position 3 of", fname, n + 1)
        raises(function() op.f(make(v, dt)) end, msg)
        raises(function() op.f(make(v, dt)) end, string.format("out of range 1..%d", n))
        if op.axis then
          raises(function() op.f(make(v, dt)) end, "for axis " .. op.axis)
        end
      end)
      if dt ~= "u8" then
        test(opname .. " " .. kind .. " " .. dt .. " index before the start is an error", function()
          raises(function() op.f(make({1, -(n + 1)}, dt)) end,
                 string.format("index %d at position 2", -(n + 1)))
        end)
      end
    end
    -- a compile placeholder has no values when the op is built: checked
    -- when the compiled function runs
    test(opname .. " compiled " .. dt .. " index", function()
      local f = lm.compile(function(i) return op.f(i) end)
      same(vals(f(lm.tensor(values, {dtype = dt}))), ref, opname .. " compiled")
      raises(function() vals(f(lm.tensor({1, 0, 2}, {dtype = dt}))) end)
      raises(function() vals(f(lm.tensor({1, 2, n + 1}, {dtype = dt}))) end)
    end)
  end
end

test("one_hot of a lazy u8 index: the values, not only agreement", function()
  same(lm.one_hot(lm.tensor({2, 1, 5}, {dtype = "u8"}) + 0, 5):totable(),
       {{0, 1, 0, 0, 0}, {1, 0, 0, 0, 0}, {0, 0, 0, 0, 1}})
  raises(function() lm.one_hot(lm.tensor({0, 1, 9}, {dtype = "u8"}) + 0, 10) end,
         "one_hot: index 0 at position 1 of indices")
end)

test("topk's indices feed index_select and one_hot", function()
  local v = lm.tensor{3, 9, 1, 7}
  local top, i = v:topk(2)
  same(v:index_select(1, i):totable(), top:totable())
  same(i:totable(), {2, 4})
  same(lm.one_hot(i, 4):totable(), {{0, 1, 0, 0}, {0, 0, 0, 1}})
  local _, s = v:sort()
  same(v[s]:totable(), {1, 3, 7, 9})
end)

test("argmax's index feeds embedding", function()
  local logits = lm.tensor{{0.1, 0.9, 0.2}, {0.8, 0.1, 0.0}}
  same(lm.embedding(logits:argmax(2), w):totable(), {{4, 5, 6}, {1, 2, 3}})
end)

test("float indices are rejected by name", function()
  raises(function() x2:index_select(1, lm.tensor{1, 2}) end, "must have an integer dtype, got f32")
  raises(function() lm.one_hot(lm.tensor{1.0} + 0, 3) end, "one_hot: indices must have an integer dtype")
end)
