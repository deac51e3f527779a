-- test_newcomer.lua - what a new user (often from PyTorch) tries first:
-- options inside the shape table (lua/l_create.c), axes counted from 1 in
-- every error (lua/l_tensor.c's lm_lua_error), PyTorch's names and an error
-- naming a missing method (lua/l_torch.c), lm.grad's and lm.save's messages.
local T, lm = ...
local test, eq, ok, raises, same = T.test, T.eq, T.ok, T.raises, T.same

-- ---- options inside the shape table (issue 23 item 12) ----
test("randn{2, 3, seed = 1} is seeded", function()
  same(lm.randn{2, 3, seed = 1}:totable(), lm.randn({2, 3}, {seed = 1}):totable())
  same(lm.rand{4, seed = 7, low = 2, high = 3}:totable(), lm.rand({4}, {seed = 7, low = 2, high = 3}):totable())
  same(lm.rand({seed = 1}):totable(), lm.rand({}, {seed = 1}):totable())
  eq(lm.rand({seed = 1}).ndim, 0, "options only: the shape {}")
end)

test("dtype and device inside the shape table", function()
  eq(lm.zeros{2, dtype = "f16"}.dtype, "f16")
  eq(lm.ones{2, 2, dtype = "i32"}.dtype, "i32")
  eq(lm.full({2, dtype = "i64"}, 7).dtype, "i64")
  same(lm.full({2, dtype = "i64"}, 7):totable(), {7, 7})
  eq(lm.randn{3, dtype = "f64"}.dtype, "f64")
  eq(lm.tensor{1, 2, dtype = "i64"}.dtype, "i64")
  eq(lm.zeros{2, device = "cpu"}.device, "cpu")
end)

test("unknown or doubled options in the shape table are errors", function()
  raises(function() lm.zeros{2, dtyp = "f16"} end, "lm.zeros: unknown option 'dtyp'")
  raises(function() lm.randn{2, sed = 1} end, "lm.randn: unknown option 'sed'")
  raises(function() lm.tensor{1, 2, dtpye = "i64"} end, "lm.tensor: unknown option 'dtpye'")
  raises(function() lm.zeros({2, dtype = "f16"}, {dtype = "f32"}) end, "options given both")
  raises(function() lm.zeros{2, [5] = 1} end, "key [5] in the shape table")
  raises(function() lm.randn{2, seed = 1.5} end, "lm.randn: option 'seed' must be an integer")
end)

-- ---- axes in error messages count from 1 (item 10) ----
local function axis_msg(fn, want)
  raises(fn, want)
end
test("axis numbers in errors are Lua's", function()
  axis_msg(function() lm.concat({lm.ones{2, 3}, lm.ones{3, 3}}, 2) end, "on axis 2")
  axis_msg(function() lm.concat({lm.ones{2, 3}, lm.ones{2, 4}}, 1) end, "on axis 1")
  axis_msg(function() lm.ones{2, 3}:permute{1, 1} end, "permute: axis 1 repeated")
  axis_msg(function() lm.ones{2, 3}:permute{2, 2} end, "permute: axis 2 repeated")
  axis_msg(function() lm.ones{2, 3}:topk(5) end, "out of range for axis 2")
  axis_msg(function() lm.ones{2, 3}:topk(5, 1) end, "out of range for axis 1")
  axis_msg(function() lm.ones{2, 0}:max(2) end, "max: reduction over an empty axis 2")
  axis_msg(function() lm.ones{0, 3}:max(1) end, "max: reduction over an empty axis 1")
  axis_msg(function() lm.ones{0, 3}:argmax(1) end, "empty axis 1")
  axis_msg(function() lm.ones{2, 3}:split(4, 2) end, "split: axis 2 of size 3")
  axis_msg(function() lm.ones{2, 3}:squeeze(1) end, "squeeze: axis 1 of [2,3]")
  axis_msg(function() lm.ones{2, 3}:flatten(2, 1) end, "end axis 1 before start axis 2")
  axis_msg(function() lm.ones{4, 3}:index_select(1, lm.tensor({5}, {dtype = "i64"})) end,
           "for axis 1 is out of range 1..4")
  axis_msg(function() lm.ones{4, 3}:index_select(2, lm.tensor({4}, {dtype = "i64"}) + 0) end,
           "for axis 2 is out of range 1..3")
end)

-- ---- PyTorch's names (item 16) ----
test("torch aliases", function()
  local x = lm.arange(6):reshape{2, 3}
  same(x:view(3, 2):totable(), {{0, 1}, {2, 3}, {4, 5}})
  same(x:view{3, -1}:totable(), {{0, 1}, {2, 3}, {4, 5}})
  same(x:t():totable(), {{0, 3}, {1, 4}, {2, 5}})
  same(lm.arange(3):t():totable(), {0, 1, 2})
  same(x:mm(x:t()):totable(), {{5, 14}, {14, 50}})
  same(lm.mm(x, x:t()):totable(), {{5, 14}, {14, 50}})
  same(lm.ones{2, 2, 3}:bmm(lm.ones{2, 3, 1}):totable(), {{{3}, {3}}, {{3}, {3}}})
  eq(x:to("f16").dtype, "f16")
  eq(x:to("cpu").device, "cpu")
  eq(x:to("cpu", "f64").dtype, "f64")
  eq(x:to("f32", "cpu").dtype, "f32")
  ok(rawequal(x:to("i64"), x), "to() without a change is t itself")
  eq(x:numel(), 6); eq(x:dim(), 2)
  eq(x:float().dtype, "f32"); eq(x:half().dtype, "f16"); eq(x:double().dtype, "f64")
  eq(x:bfloat16().dtype, "bf16"); eq(x:float():long().dtype, "i64"); eq(x:int().dtype, "i32")
  eq(x:bool().dtype, "bool"); eq(x:cpu().device, "cpu")
  same(x:clone():totable(), x:totable())
  same(lm.cat({x, x}):totable(), lm.concat({x, x}):totable())
  same(lm.cat({x, x}, 2):totable(), lm.concat({x, x}, 2):totable())
  lm.manual_seed(5); local a = lm.rand{3}:totable()
  lm.manual_seed(5); same(lm.rand{3}:totable(), a)
  eq(x.size, 6, "t.size stays numpy's element count")
end)

test("torch names refuse what torch refuses", function()
  local x = lm.ones{2, 3, 4}
  raises(function() x:t() end, "t:t: a 3-d tensor has no t()")
  raises(function() x:mm(x) end, "mm: both operands must be 2-d")
  raises(function() lm.ones{2, 2}:bmm(lm.ones{2, 2}) end, "bmm: both operands must be 3-d")
  raises(function() x:to("f17") end, "'f17' is neither a dtype")
  raises(function() x:to("f16", "f32") end, "two dtypes")
end)

test("a missing method is named", function()
  local x = lm.ones{2}
  raises(function() x:foo() end, "method 'foo'")   -- Lua's own message names it
  eq(x.foo, nil, "a field no one knows is nil, as Lua code testing t.field expects")
  raises(function() x:cuda() end, "tensor has no method 'cuda' (in Lumen: t:to(\"vulkan\"))")
  raises(function() x:numpy() end, "t:totable()")
  raises(function() x:backward() end, "lm.grad")
  eq(type(x.shape), "table", "properties still read")
end)

-- ---- messages (items 14 and 10's lm.save) ----
test("lm.grad on a non-scalar names the shape", function()
  local g = lm.grad(function(x) return x * 2 end)
  raises(function() g(lm.tensor{1, 2, 3}) end, "got shape [3] (3 elements)")
end)

test("lm.save with a string value names the key", function()
  local p = os.tmpname()
  raises(function() lm.save(p .. ".safetensors", {w = lm.ones{2}, note = "hello"}) end,
         "lm.save: the value of 'note' is a string")
  os.remove(p)
end)

test("options of the file functions name the function", function()
  raises(function() lm.image.write_png(os.tmpname() .. ".png", lm.ones{3, 2, 2}, {bits = "eight"}) end,
         "lm.image.write_png: option 'bits' must be a number")
  raises(function() lm.compare(lm.ones{2}, lm.ones{2}, {rtol = "x"}) end,
         "lm.compare: option 'rtol' must be a number")
end)
