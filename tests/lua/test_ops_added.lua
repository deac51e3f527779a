-- test_ops_added.lua - the ops added through docs/DEVELOPING.md's
-- checklist (erfc, logaddexp) and integer floor division (issue 23 item 6).
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
