-- test_compile.lua - lm.compile: results equal to uncompiled runs, fusion,
-- retracing exactly on signature changes, shapeless, LRU and errors.
local T, lm = ...
local test, eq, ok, raises = T.test, T.eq, T.ok, T.raises

local function maxdiff(a, b) return (a - b):abs():max():item() end

test("a compiled chain equals the uncompiled one, bitwise, in one kernel", function()
  local a, b = lm.rand({4096}, {seed = 1}), lm.rand({4096}, {seed = 2})
  local function chain(x) return (x * a + b):gelu_tanh() * a end
  local f = lm.compile(chain)
  for _, dt in ipairs{"f32", "f64", "f16", "bf16"} do
    local x = lm.randn({4096}, {seed = 3}):astype(dt)
    local y = f(x:astype("f32"))
    eq(maxdiff(y, chain(x:astype("f32"))), 0)
  end
  eq(f:kernels(), 1)
end)

test("SwiGLU and a 10-op chain fuse into one kernel each", function()
  local sw = lm.compile(function(g, u) return g:silu() * u end)
  local g, u = lm.randn{64, 64}, lm.randn{64, 64}
  eq(maxdiff(sw(g, u), g:silu() * u), 0)
  eq(sw:kernels(), 1)
  local ten = lm.compile(function(x)
    return x:sin():exp():neg():tanh():abs():sqrt():sigmoid():square():silu():cos()
  end)
  local x = lm.randn{1000}
  eq(maxdiff(ten(x), x:sin():exp():neg():tanh():abs():sqrt():sigmoid():square():silu():cos()), 0)
  eq(ten:kernels(), 1)
end)

test("retrace happens exactly when the signature changes", function()
  local f = lm.compile(function(x, s) return x * s end)
  f(lm.ones{3}, 2); f(lm.ones{3}, 2); f(lm.zeros{3}, 2)
  eq(f:traces(), 1)
  f(lm.ones{4}, 2)                -- new shape
  eq(f:traces(), 2)
  f(lm.ones{4}, 3)                -- a number is part of the signature
  eq(f:traces(), 3)
  f(lm.ones({4}, {dtype = "f64"}), 3)   -- new dtype
  eq(f:traces(), 4)
  eq(f(lm.ones{4}, 3):sum():item(), 12)
end)

test("shapeless functions take new shapes without retracing", function()
  local f = lm.compile(function(x) return x:exp() + 1 end, {shapeless = true})
  eq(f(lm.zeros{5}):sum():item(), 10)
  eq(f(lm.zeros{2, 7}):sum():item(), 28)
  local made = f:traces()
  eq(made, 2)                     -- ndim is part of the signature
  f(lm.zeros{9})
  eq(f:traces(), 2)
end)

test("the trace cache is bounded (LRU) and clear frees the constants", function()
  local w = lm.ones{256, 256}
  local f = lm.compile(function(x) return x + w * 2 end, {cache = 2})
  f(lm.ones{256, 256}); f(lm.ones{1, 256}); f(lm.ones{256, 1})
  local made, cached = f:traces()
  eq(made, 3); eq(cached, 2)
  f(lm.ones{256, 256})            -- evicted before: traced again
  eq((f:traces()), 4)
  collectgarbage(); collectgarbage()
  local before = lm.memory().active
  f:clear()
  collectgarbage(); collectgarbage()
  ok(lm.memory().active < before, "clearing released the folded constants")
end)

test("nested compiled functions inline into the outer trace", function()
  local inner = lm.compile(function(x) return x:exp() end)
  local outer = lm.compile(function(x) return inner(x) * 2 + 1 end)
  local x = lm.randn{100}
  eq(maxdiff(outer(x), x:exp() * 2 + 1), 0)
  eq(outer:kernels(), 1)
  eq((inner:traces()), 0)
end)

test("tracing errors are clear", function()
  raises(function() lm.compile(function(x) return 3 end)(lm.ones{2}) end, "expected a tensor")
  raises(function() lm.compile(function(x) return x + lm.ones{3} end)(lm.ones{2}) end, "cannot be broadcast")
  raises(function() lm.compile(function(x) print(x:sum():item()); return x end)(lm.ones{2}) end, "placeholder")
end)

test("compile_mode off runs plain Lua; graph and export_dot describe", function()
  local prev = lm.compile_mode("off")
  local calls = 0
  local f = lm.compile(function(x) calls = calls + 1; return x + 1 end)
  f(lm.ones{2}); f(lm.ones{2})
  eq(calls, 2)
  lm.compile_mode(prev)
  f(lm.ones{2}); f(lm.ones{2})
  eq(calls, 3)
  ok(f:graph():find("kernels"), "graph text")
  local path = os.tmpname()
  lm.export_dot((lm.ones{2} + 1):exp(), path)
  local fh = io.open(path); local text = fh:read("a"); fh:close(); os.remove(path)
  ok(text:find("digraph"), "dot file")
end)
