-- test_profile.lua - lm.profile (lua/l_profile.c over core/profile.c): a row
-- per op, kernel, shapes, dtype and device with the right count, times that
-- sum to the total, fn's results passed through, nesting, an error in fn
-- closing the profile, the options rule; on Vulkan (lavapipe here) GPU times
-- and the shaders' names, transfers with bytes, CPU fallbacks as rows.
local T, lm = ...
local test, eq, ok, raises, near = T.test, T.eq, T.ok, T.raises, T.near

local function rows_of(p, op, device)
  local out = {}
  for _, r in ipairs(p) do
    if r.op == op and (not device or r.device == device) then out[#out + 1] = r end
  end
  return out
end

local function check_sums(p)
  local sum, pct = 0, 0
  for i, r in ipairs(p) do
    ok(r.count > 0 and r.total_ms >= 0 and r.min_ms >= 0, "row " .. i .. " times")
    ok(r.min_ms <= r.mean_ms + 1e-9 and r.mean_ms <= r.max_ms + 1e-9, "row " .. i .. " min <= mean <= max")
    if i > 1 then ok(p[i - 1].total_ms >= r.total_ms, "sorted by total") end
    sum, pct = sum + r.total_ms, pct + r.percent
  end
  near(sum, p.total_ms, 1e-9, "rows sum to the total")
  if p.total_ms > 0 then near(pct, 100, 1e-6, "percents") end
end

-- three products of one shape, then + 1
local function chain(device)
  local x = lm.full({8, 8}, 0.5, {device = device}):eval()
  local w = lm.full({8, 8}, 0.25, {device = device}):eval()
  return function()
    local y = x
    for _ = 1, 3 do y = y:matmul(w) end
    return y + 1, "second"
  end
end

test("three matmuls of one shape are one row of count 3; fn's results come back", function()
  local y, s, p = lm.profile({print = false}, chain("cpu"))
  eq(s, "second", "fn's second result")
  eq(y:totable()[1][1], 5)
  local mm = rows_of(p, "matmul")
  eq(#mm, 1, "one matmul row")
  eq(mm[1].count, 3)
  eq(mm[1].shape, "[8,8] [8,8] -> [8,8]")
  eq(mm[1].dtype, "f32")
  eq(mm[1].device, "cpu")
  eq(mm[1].timer, "host")
  eq(rows_of(p, "add")[1].count, 1)
  eq(p.evals, 1)
  check_sums(p)
  ok(p.text:find("lumen profile: 1 evaluation", 1, true), "the table's header")
  ok(p.text:find("matmul", 1, true), "the table names matmul")
end)

test("arguments go to fn; a function with no tensors gives an empty profile", function()
  local a, p = lm.profile({print = false}, function(u, v) return u + v end, 2, 3)
  eq(a, 5)
  eq(#p, 0)
  eq(p.total_ms, 0)
end)

test("nested profiles: the outer one sees the inner one's work too", function()
  local inner
  local _, outer = lm.profile({print = false}, function()
    local f = chain("cpu")
    f()
    local r = f()
    _, _, inner = lm.profile({print = false}, f)
    return r
  end)
  eq(rows_of(inner, "matmul")[1].count, 3)
  eq(rows_of(outer, "matmul")[1].count, 6)
  ok(outer.total_ms >= inner.total_ms)
end)

test("an error inside fn stops profiling and is raised as fn raised it", function()
  -- more failures than profiles may nest: none of them is left open
  for _ = 1, 12 do
    raises(function() lm.profile(function() error("inside fn") end) end, "inside fn")
  end
  raises(function() lm.profile(function() return lm.ones{2} + lm.ones{3} end) end, "broadcast")
  local _, p = lm.profile({print = false}, function() return lm.ones{2}:sum() end)
  eq(#rows_of(p, "sum"), 1)
  eq(p.evals, 1)
end)

test("compiled chains are one row named after their steps", function()
  local f = lm.compile(function(x) return ((x + 1) * 2):exp() end)
  local x = lm.ones{16}:eval()
  local _, p = lm.profile({print = false}, f, x)
  local fused = rows_of(p, "fused")
  eq(#fused, 1)
  ok(fused[1].kernel:find("fused(add,mul,exp)", 1, true), "kernel " .. fused[1].kernel)
end)

test("by = 'kernel' or 'op' merges the rows that differ in shapes (and kernels)", function()
  local a, b = lm.ones{4, 8}:eval(), lm.ones{8, 8}:eval()
  local function f() return a:matmul(b), b:matmul(b), b:matmul(b) end
  local _, _, _, p = lm.profile({print = false}, f)
  eq(#rows_of(p, "matmul"), 2)
  for _, by in ipairs{"kernel", "op"} do
    _, _, _, p = lm.profile({print = false, by = by}, f)
    local mm = rows_of(p, "matmul")
    eq(#mm, 1, by)
    eq(mm[1].count, 3, by)
    eq(mm[1].shape, "", by)
    eq(mm[1].kernel, by == "op" and "" or "sgemm", by)
  end
  raises(function() lm.profile({by = "name"}, f) end, "lm.profile: option 'by' must be \"shape\", \"kernel\" or \"op\"")
end)

test("options and arguments follow the options rule", function()
  raises(function() lm.profile({prints = false}, function() end) end,
         "lm.profile: unknown option 'prints' (known: print, rows, by)")
  raises(function() lm.profile(42) end, "lm.profile: argument 1 must be a function, got number")
  raises(function() lm.profile({print = "no"}, function() end) end, "option 'print' must be a boolean")
  raises(function() lm.profile({rows = 1.5}, function() end) end, "option 'rows' must be an integer")
  local _, _, p = lm.profile({print = false, rows = 1}, chain("cpu"))
  ok(#p >= 2, "every row is returned (matmul, add)")
  ok(p.text:find("... " .. (#p - 1) .. " more rows", 1, true), "the table shows one: " .. p.text)
end)

local vk
for _, d in ipairs(lm.devices()) do if d.backend == "vulkan" then vk = d.spec; break end end

if vk then
  test("on Vulkan: GPU times from timestamps, shader names, transfers with bytes", function()
    local f = chain(vk)
    local _, _, p = lm.profile({print = false}, function()
      local y = f()
      return y, y:totable()   -- a download (of f64 values: totable casts on the device)
    end)
    local mm = rows_of(p, "matmul", vk)
    eq(#mm, 1)
    eq(mm[1].count, 3)
    eq(mm[1].timer, "gpu")
    ok(mm[1].total_ms > 0 and mm[1].min_ms > 0, "GPU time of every dispatch")
    ok(mm[1].kernel:find("matmul", 1, true), "the shader's name: " .. mm[1].kernel)
    local down = rows_of(p, "download", vk)
    eq(#down, 1)
    eq(down[1].bytes, 8 * 8 * 8)
    check_sums(p)
  end)

  test("on Vulkan: a node the device cannot run is a CPU row that says so", function()
    local d = lm.tensor({0, 1, 2}, {dtype = "f64", device = vk}):eval()
    local fb = os.getenv("LUMEN_FALLBACK")
    local _, p = lm.profile({print = false}, function() return d:exp() end)
    local r = rows_of(p, "exp", "cpu")
    eq(#r, 1)
    eq(r[1].kernel, "fallback from " .. vk)
    eq(rows_of(p, "upload", vk)[1].bytes, 24)
    eq(fb, os.getenv("LUMEN_FALLBACK"))
  end)
end

-- LUMEN_PROFILE in the environment of a fresh process
local lumen_bin = (os.getenv("BUILD") or "build") .. "/lumen"
local function run_env(value, code)
  local p = assert(io.popen(string.format("LUMEN_DEVICE=cpu LUMEN_PROFILE=%s %s -e '%s' 2>&1", value, lumen_bin, code)))
  local out = p:read("a")
  p:close()
  return out
end

local function count(s, what)
  local n = 0
  for _ in s:gmatch(what) do n = n + 1 end
  return n
end

test("LUMEN_PROFILE=1: a table after each evaluation; =total: one at exit", function()
  local code = "local x = lm.ones{4, 4}; x:matmul(x):eval(); x:matmul(x):eval(); print(\"done\")"
  local per = run_env("1", code)
  eq(count(per, "lumen profile: 1 evaluation"), 2, "one per product (the first makes x): " .. per)
  eq(count(per, "\n  matmul "), 2, "one matmul row in each of the two reports")
  ok(per:find("done", 1, true))
  local total = run_env("total", code)
  eq(count(total, "lumen profile:"), 1, "one report: " .. total)
  ok(total:find("lumen profile: 2 evaluations", 1, true), total)
  ok(total:find("done\n", 1, true) < total:find("lumen profile", 1, true), "at exit, after the script's output")
  ok(total:match("\n  matmul +sgemm +cpu +f32 +host +2 "), "both products in one row: " .. total)
  local bad = run_env("yes", code)
  ok(bad:find("LUMEN_PROFILE=yes: expected 1", 1, true), bad)
  eq(count(run_env("0", code), "lumen profile"), 0, "0 is off")
end)
