-- test_ops_added.lua - the ops added through docs/DEVELOPING.md's
-- checklist (erfc, logaddexp, hypot) and integer floor division (issue 23
-- item 6).
local T, lm = ...
local test, eq, same, raises, near, ok = T.test, T.eq, T.same, T.raises, T.near, T.ok

test("a // b keeps integer dtypes and is exact", function()
  local a = lm.full({1}, 16777217, {dtype = "i32"}) // 1
  eq(a.dtype, "i32")
  same(a:totable(), {16777217})
  local b = lm.full({1}, 123456789, {dtype = "i64"}) // 1
  eq(b.dtype, "i64")
  same(b:totable(), {123456789})
  -- rounds toward -inf, as Python and torch.floor_divide
  local n = lm.tensor({7, -7, 7, -7, 0}, {dtype = "i64"}) // lm.tensor({2, 2, -2, -2, 3}, {dtype = "i64"})
  eq(n.dtype, "i64")
  same(n:totable(), {3, -4, -4, 3, 0})
  same(lm.floor_divide(lm.tensor({-9}, {dtype = "i32"}), 4):totable(), {-3})
  eq((lm.tensor({5}, {dtype = "u8"}) // 2).dtype, "u8")
  -- floats: floor of the quotient, as before
  same((lm.tensor{7.5, -7.5} // 2):totable(), {3, -4})
end)

test("integer division by zero is an error", function()
  raises(function() return (lm.tensor({1, 2}, {dtype = "i32"}) // 0):totable() end, "division by zero")
  local f = (lm.tensor{1.5, -1.5} // 0):totable()   -- floats: +-inf, as torch
  eq(f[1], math.huge)
  eq(f[2], -math.huge)
end)

test("integer % by zero is an error on every backend, as Lua's and Python's", function()
  local devs = {"cpu"}
  for _, d in ipairs(lm.devices()) do if d.backend == "vulkan" then devs[#devs + 1] = d.spec; break end end
  for _, dev in ipairs(devs) do
    for _, dt in ipairs{"i32", "i64", "u8"} do
      local a = lm.tensor({7, -7}, {dtype = dt}):to(dev)
      raises(function() return (a % 0):totable() end, "modulo by zero")
      raises(function() return lm.mod(a, lm.tensor({2, 0}, {dtype = dt}):to(dev)):totable() end,
             "modulo by zero")
      -- compiled chains too
      local f = lm.compile(function(t) return (t + 1) % 0 end)
      raises(function() return f(a):totable() end, "modulo by zero")
    end
    raises(function() return (lm.tensor({true}):to(dev) % lm.tensor({false}):to(dev)):totable() end,
           "modulo by zero")
    same((lm.tensor({7, -7}, {dtype = "i32"}):to(dev) % 3):totable(), {1, 2})
    local f = (lm.tensor{1.5}:to(dev) % 0):totable()   -- floats: NaN, as torch
    ok(f[1] ~= f[1], "float % 0 is NaN on " .. dev)
  end
end)

test("erfc and logaddexp", function()
  local x = lm.tensor{-1, 0, 0.5, 2}
  local e = x:erfc():totable()
  local want = {1.8427007929497148, 1, 0.4795001221869535, 0.004677734981047266}
  for i = 1, 4 do near(e[i], want[i], 1e-6) end
  near(lm.erfc(lm.tensor{3}):item(), 2.209049699858544e-05, 1e-10)
  local l = lm.logaddexp(lm.tensor{0, 1000, -math.huge}, lm.tensor{0, 1000, -math.huge}):totable()
  near(l[1], math.log(2), 1e-6)
  near(l[2], 1000 + math.log(2), 1e-3)
  eq(l[3], -math.huge)
  eq(lm.logaddexp(lm.tensor({1}, {dtype = "i32"}), 2).dtype, "f32")
end)

-- hypot's row sits between ne and lt in core/op.h, among the bool-valued
-- comparisons: its results must not depend on that (issue 33), on any
-- device and in any float dtype
test("hypot on every device and dtype, its row among the comparisons", function()
  local devices = {"cpu"}
  for _, d in ipairs(lm.devices()) do
    if d.backend == "vulkan" then devices[#devices + 1] = d.spec end
  end
  for _, dev in ipairs(devices) do
    -- f64 hypot is not exact in GLSL: Vulkan leaves it to the CPU (the v64 column)
    for _, dt in ipairs(dev == "cpu" and {"f32", "f16", "bf16", "f64", "i32"} or {"f32", "f16", "bf16", "i32"}) do
      local a = lm.tensor({3, 6, 5, 8, -7}, {dtype = dt, device = dev})
      local b = lm.tensor({4, 8, 12, 15, 24}, {dtype = dt, device = dev})
      local h = lm.hypot(a, b)
      eq(h.dtype, dt == "i32" and "f32" or dt)
      same(h:totable(), {5, 10, 13, 17, 25})
      same(a:hypot(2):totable(), lm.hypot(a, lm.full({5}, 2, {dtype = dt, device = dev})):totable())
    end
    -- no overflow where the squares would, and C's rules at inf and NaN
    local big = lm.hypot(lm.tensor({3e30, math.huge, 0 / 0}, {device = dev}), lm.tensor({4e30, 0 / 0, 1}, {device = dev}))
    local t = big:totable()
    near(t[1], 5e30, 5e24)
    eq(t[2], math.huge)
    eq(t[3] ~= t[3], true)
  end
end)
