-- test_print.lua - tostring(t): exact text, summarising, and that printing
-- a table of lazy tensors (t:brief) does not evaluate them.
local T, lm = ...
local test, eq, ok = T.test, T.eq, T.ok

-- the expected texts name the CPU; on another default device (LUMEN_DEVICE,
-- or a GPU found) its name is mapped back so the formatting is what is tested
local dev = lm.device()
local function cpu_named(s)
  return (s:gsub(" " .. dev:gsub("%p", "%%%0") .. "([ >])", " cpu%1"))
end
local function p(t) return cpu_named(tostring(t)) end

test("integers and floats", function()
  eq(p(lm.tensor{{1, 2, 3}, {4, 5, 6}}), "[[1., 2., 3.],\n [4., 5., 6.]]\n<tensor f32 [2,3] cpu>")
  eq(p(lm.arange(6):reshape{2, 3}), "[[0, 1, 2],\n [3, 4, 5]]\n<tensor i64 [2,3] cpu>")
  eq(p(lm.tensor{{-1.5, 2}, {3.25, 100}}),
     "[[ -1.50,   2.00],\n [  3.25, 100.00]]\n<tensor f32 [2,2] cpu>")
  eq(p(lm.tensor{0.5, 1, 1.5}), "[0.5, 1.0, 1.5]\n<tensor f32 [3] cpu>")
  eq(p(lm.tensor{1, 2, 3}:astype("f16") / 3), "[0.3333, 0.6665, 1.0000]\n<tensor f16 [3] cpu>")
  eq(p(lm.tensor({1, -2}, "i8")), "[ 1, -2]\n<tensor i8 [2] cpu>")
end)

test("scientific, special values, booleans, scalars, empty", function()
  eq(p(lm.tensor{1e-5, 1, 1e9}), "[1e-05, 1e+00, 1e+09]\n<tensor f32 [3] cpu>")
  eq(p(lm.tensor{1.5e-5, 1}), "[1.5e-05, 1.0e+00]\n<tensor f32 [2] cpu>")
  eq(p(lm.tensor{0 / 0, 1 / 0, -1 / 0, 1.5}), "[ nan,  inf, -inf,  1.5]\n<tensor f32 [4] cpu>")
  eq(p(lm.tensor{true, false}), "[ true, false]\n<tensor bool [2] cpu>")
  eq(p(lm.tensor(3.5)), "3.5\n<tensor f32 [] cpu>")
  eq(p(lm.tensor(2, "i32")), "2\n<tensor i32 [] cpu>")
  eq(p(lm.zeros{0}), "[]\n<tensor f32 [0] cpu>")
  eq(p(lm.zeros{2, 0}), "[]\n<tensor f32 [2,0] cpu>")
end)

test("three dimensions separate blocks with a blank line", function()
  eq(p(lm.arange(8):reshape{2, 2, 2}),
     "[[[0, 1],\n  [2, 3]],\n\n [[4, 5],\n  [6, 7]]]\n<tensor i64 [2,2,2] cpu>")
end)

test("long rows wrap at 80 columns", function()
  local s = p(lm.arange(30))
  eq(s, "[ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,\n" ..
        " 20, 21, 22, 23, 24, 25, 26, 27, 28, 29]\n<tensor i64 [30] cpu>")
  for line in s:gmatch("[^\n]+") do ok(#line <= 80, "line width") end
end)

test("past 1000 elements it summarises with 3 edge items", function()
  eq(p(lm.arange(1000)):match("^%[%s*(%d+),"), "0")
  ok(not p(lm.arange(1000)):find("...", 1, true), "1000 elements print in full")
  eq(p(lm.arange(1001)), "[   0,    1,    2, ...,  998,  999, 1000]\n<tensor i64 [1001] cpu>")
  eq(p(lm.arange(3000):reshape{3, 1000}),
     "[[   0,    1,    2, ...,  997,  998,  999],\n" ..
     " [1000, 1001, 1002, ..., 1997, 1998, 1999],\n" ..
     " [2000, 2001, 2002, ..., 2997, 2998, 2999]]\n<tensor i64 [3,1000] cpu>")
  eq(p(lm.arange(2000):reshape{1000, 2}),
     "[[   0,    1],\n [   2,    3],\n [   4,    5],\n ...,\n" ..
     " [1994, 1995],\n [1996, 1997],\n [1998, 1999]]\n<tensor i64 [1000,2] cpu>")
  -- the number format comes from the printed elements only
  local t = lm.arange(2000):astype("f32")
  t[{{4, -4}}] = 1e20
  eq(p(t), "[   0.,    1.,    2., ..., 1997., 1998., 1999.]\n<tensor f32 [2000] cpu>")
end)

test("print options", function()
  lm.set_printoptions{precision = 2}
  local s = p(lm.tensor{1 / 3})
  lm.set_printoptions{precision = 4}
  eq(s, "[0.33]\n<tensor f32 [1] cpu>")
end)

test("brief never evaluates", function()
  local t = lm.ones{2} + 1
  eq(cpu_named(t:brief()), "<tensor f32 [2] cpu lazy>")
  eq(t.evaluated, false)
  eq(tostring(t):sub(1, 6), "[2., 2")
  eq(t.evaluated, true)
  eq(t:brief(), "<tensor f32 [2] cpu>")
  local u = lm.ones{2}
  u:free()
  eq(u:brief(), "<tensor f32 [2] cpu freed>")
end)

test("a shape prints as {3, 64, 64} and stays a table (issue 34: table: 0x...)", function()
  local t = lm.zeros{3, 64, 64}
  local s = t.shape
  eq(tostring(s), "{3, 64, 64}")
  eq(tostring(lm.tensor(2).shape), "{}")
  eq("shape " .. s, "shape {3, 64, 64}")
  eq(s .. "!", "{3, 64, 64}!")
  eq(type(s), "table")
  eq(s[1], 3); eq(#s, 3)
  local n = 0
  for i, v in ipairs(s) do n = n + i * v end
  eq(n, 3 + 128 + 192)
  ok(s == lm.ones{3, 64, 64}.shape, "two shapes of the same sizes are equal")
  ok(s == {3, 64, 64} and {3, 64, 64} == s, "a shape equals a table of the same sizes")
  ok(s ~= {3, 64} and s ~= {3, 64, 65} and s ~= lm.ones{3, 64}.shape, "other sizes differ")
  ok(s ~= {3, 64, "64"}, "a string is not a size")
  s[1] = 5   -- still a plain table: lm.zeros takes it back
  eq(tostring(lm.zeros(s).shape), "{5, 64, 64}")
  eq(tostring(lm.compare(t, t).shape_a), "{3, 64, 64}")
end)
