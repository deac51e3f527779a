-- test_diff.lua - comparison sessions (lm.diff, lm.trace, LUMEN_DUMP,
-- lumen diff): planted faults found at the right node and line, a clean
-- model clean, compiled runs aligned with uncompiled ones, dumps as
-- references.  The device fault runs on Vulkan (lavapipe) when present.
local T, lm = ...
local test, eq, ok, raises = T.test, T.eq, T.ok, T.raises

local function line() return debug.getinfo(2, "l").currentline end
local FILE = "test_diff.lua:"

-- A model of 100+ nodes: a residual MLP, one sin in the middle (the op the
-- fault hook breaks), and optionally a product that overflows f16.
local w1 = (lm.randn({32, 32}, {seed = 11}) * 0.15):eval()
local w2 = (lm.randn({32, 32}, {seed = 12}) * 0.15):eval()
local SIN_LINE, BIG_LINE
local function model(x, overflow)
  local h = x
  for i = 1, 16 do
    local y = h:matmul(w1):tanh()
    y = y:matmul(w2) * 0.5 + 0.25
    h = (h + y):tanh()
    if i == 6 then
      h = h:sin(); SIN_LINE = line()
      if overflow then
        h = h * 300 * 400; BIG_LINE = line()
        h = h / 120000
      end
    end
  end
  return h:mean(-1)
end
local x = lm.randn({8, 32}, {seed = 13})

local function nodes_of(r) return #r.nodes end

test("a clean model reports no divergence (f32 against f64)", function()
  local r = lm.diff(model, {x}, {a = {dtype = "f32"}, b = {dtype = "f64"}, rtol = 1e-4, atol = 1e-5})
  ok(nodes_of(r) >= 100, "100+ nodes, got " .. nodes_of(r))
  ok(r.ok, "ok")
  eq(r.first, nil, "first")
  eq(r.nan, nil, "nan")
  ok(tostring(r):find("no divergence", 1, true), "printed")
  local same = lm.diff(model, {x})
  eq(same.worst, nil, "nothing adds error when both runs are the same")
  for _, n in ipairs(same.nodes) do
    if n.max_abs then eq(n.max_abs, 0, "bitwise equal at " .. n.index) end
  end
end)

test("every node has its op, shape and the Lua line that built it", function()
  local r = lm.diff(model, {x})
  local sin
  for _, n in ipairs(r.nodes) do
    if n.op == "sin" then sin = n end
  end
  ok(sin, "a sin node")
  eq(sin.where, FILE .. SIN_LINE)
  eq(sin.shape[1], 8)
  eq(sin.shape[2], 32)
  eq(sin.dtype, "f32")
  eq(r.nodes[#r.nodes].op, "mean")
end)

local function with_fault(spec, fn)
  lm._test_fault(spec)
  local okk, err = pcall(fn)
  lm._test_fault(nil)
  if not okk then error(err, 0) end
end

test("an op made wrong on one configuration is the first and the worst node", function()
  with_fault("sin:cpu:f64", function()
    local r = lm.diff(model, {x}, {a = {dtype = "f32"}, b = {dtype = "f64"}, rtol = 1e-4, atol = 1e-5})
    ok(not r.ok, "diverges")
    eq(r.first.op, "sin")
    eq(r.first.where, FILE .. SIN_LINE)
    eq(r.worst.index, r.first.index, "worst is first")
    ok(r.worst.added > 0.1, "adds the error itself")
    ok(tostring(r):find("first", 1, true), "print shows it")
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir " .. dir)
    local ri = lm.diff(model, {x}, {a = {dtype = "f32"}, b = {dtype = "f64"}, rtol = 1e-4, atol = 1e-5, images = dir})
    eq(ri.first_image, dir .. ("/first-%04d.png"):format(r.first.index), "heat map of the first node")
    local img = lm.load(ri.first_image)   -- a PNG loads as one tensor
    eq(img.shape[1] == 8 or img.shape[2] == 8, true, "8 rows")
    os.remove(ri.first_image)
    if ri.worst_image then os.remove(ri.worst_image) end
    os.remove(dir)
  end)
end)

local vulkan
for _, d in ipairs(lm.devices()) do
  if d.backend == "vulkan" then vulkan = d.spec end
end
if vulkan then
  test("an op made wrong on Vulkan (lavapipe) is found against the CPU", function()
    with_fault("sin:vulkan", function()
      local r = lm.diff(model, {x}, {a = {device = "cpu"}, b = {device = vulkan}, rtol = 1e-3, atol = 1e-4})
      eq(r.first.op, "sin")
      eq(r.first.where, FILE .. SIN_LINE)
      eq(r.worst.index, r.first.index)
    end)
    local clean = lm.diff(model, {x}, {a = {device = "cpu"}, b = {device = vulkan}, rtol = 1e-3, atol = 1e-4})
    ok(clean.ok, "Vulkan matches the CPU without the fault")
  end)
end

test("an f16 overflow in the middle of a chain: first, worst and the NaN/Inf finder", function()
  local r = lm.diff(model, {x, true}, {a = {dtype = "f32"}, b = {dtype = "f16"}, rtol = 3e-2, atol = 2e-2})
  eq(r.first.where, FILE .. BIG_LINE)
  eq(r.first.op, "mul")
  eq(r.worst.index, r.first.index, "worst")
  eq(r.worst.added, math.huge, "adds infinities")
  eq(r.nan.index, r.first.index, "first Inf")
  ok(r.nan.inf_b > 0 and r.nan.inf_a == 0, "on b's side")
end)

test("the NaN finder points at the node that makes a NaN on both sides", function()
  local L
  local function f(a)
    local y = (a - 10):sqrt(); L = line()
    return (y * 2):sum()
  end
  local r = lm.diff(f, {lm.rand{16}})
  ok(r.ok == false, "not ok")
  eq(r.first, nil, "NaN matches NaN")
  eq(r.nan.op, "sqrt")
  eq(r.nan.where, FILE .. L)
  eq(r.nan.nan_a, 16)
end)

test("a compiled run aligns with the uncompiled one", function()
  local function chain(a)
    return ((a * 2 + 1):tanh() * 3 - 0.5):sigmoid():matmul(w1):exp():sum(-1)
  end
  local r = lm.diff(chain, {lm.randn({8, 32}, {seed = 3})}, {a = {compile = false}, b = {compile = true}})
  local fused, compared = 0, 0
  for _, n in ipairs(r.nodes) do
    if n.fused_b then fused = fused + 1 end
    if n.max_abs then compared = compared + 1 end
  end
  ok(fused >= 4, "elementwise nodes fused: " .. fused)
  ok(compared >= 3, "the rest compared: " .. compared)
  ok(r.ok, "fused equals unfused")
  eq(r.nodes[#r.nodes].op, "sum")
end)

local function tmpfile()
  local p = os.tmpname()
  os.remove(p)
  return p .. ".safetensors"
end

test("lm.trace dumps every node; a diff against the dump finds a fault", function()
  local p = tmpfile()
  local n = lm.trace(model, {x}, p)
  local r0 = lm.diff(model, {x})
  eq(n, #r0.nodes, "one tensor per node")
  local t = lm.load(p)
  local first
  for k in pairs(t) do if k:sub(1, 5) == "0001." then first = k end end
  ok(first and first:match("^0001%.matmul%.test_diff%.lua:%d+$"), "stable names: " .. tostring(first))
  raises(function() lm.trace(model, {x}, p) end, "exists")
  local clean = lm.diff(model, {x}, {reference = p})
  ok(clean.ok, "the same run matches its dump")
  with_fault("sin:cpu", function()
    local r = lm.diff(model, {x}, {reference = p})
    eq(r.first.op, "sin")
    eq(r.first.where, FILE .. SIN_LINE)
    ok(r.first.reference:match("^%d%d%d%d%.sin%."), "matched by name")
  end)
  os.remove(p)
end)

local LUMEN = (os.getenv("BUILD") or "build") .. "/lumen"   -- make check runs build/san
local function sh(cmd)
  local f = io.popen(cmd .. " 2>&1")
  local out = f:read("a")
  local _, _, code = f:close()
  return out, code
end

test("LUMEN_DUMP and lumen diff: two dumps compared tensor by tensor", function()
  local a, b = tmpfile(), tmpfile()
  local prog = "local x = lm.ones{4} * 3; local y = (x + 1):sqrt(); print((y * 2):sum():item())"
  sh("LUMEN_DUMP=" .. a .. " " .. LUMEN .. " -e '" .. prog .. "'")
  local t = lm.load(a)
  local names = {}
  for k in pairs(t) do names[#names + 1] = k end
  table.sort(names)
  ok(#names >= 3, "nodes dumped: " .. #names)
  ok(names[#names]:find("sum", 1, true), "last is the sum: " .. names[#names])
  sh("LUMEN_DUMP=" .. b .. " LUMEN_TEST_FAULT=sqrt " .. LUMEN .. " -e '" .. prog .. "'")
  local out, code = sh(LUMEN .. " diff " .. a .. " " .. a)
  eq(code, 0, "same dumps: " .. out)
  out, code = sh(LUMEN .. " diff " .. a .. " " .. b)
  eq(code, 1, "different dumps: " .. out)
  ok(out:find("first difference", 1, true) and out:find("sqrt", 1, true), out)
  out, code = sh(LUMEN .. " diff " .. a)
  eq(code, 2, "usage error: " .. out)
  out, code = sh(LUMEN .. " diff " .. a .. " " .. b .. " --all")
  eq(code, 1)
  ok(select(2, out:gsub("\n%d%d%d%d%.", "")) >= 3, "--all: a row per tensor: " .. out)
  os.remove(a)
  os.remove(b)
end)

-- build/lumen from another working directory
local ABS_LUMEN = LUMEN:sub(1, 1) == "/" and LUMEN or io.popen("pwd"):read("l") .. "/" .. LUMEN

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  os.execute("mkdir " .. d)
  return d
end

local function dump_names(path)
  local names = {}
  for k in pairs(lm.load(path)) do names[#names + 1] = k end
  table.sort(names)
  return names
end

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- issue 34 item 6: the lumen program cleared the hook that names nodes
-- before every chunk it ran, so LUMEN_DUMP recorded "0003.matmul.-"
test("LUMEN_DUMP under lumen records file:line as stock lua does (script, -e, stdin, lumen batch)", function()
  local d = tmpdir()
  write(d .. "/prog3.lua", "local lm = require 'lumen'\nlocal x = lm.arange(6):reshape{2, 3}:astype('f32')\n" ..
        "local y = x:matmul(x.T)\nprint(y:sum():item())\n")
  local out = sh("cd " .. d .. " && LUMEN_DUMP=s.safetensors " .. ABS_LUMEN .. " prog3.lua")
  local n = dump_names(d .. "/s.safetensors")
  eq(n[3], "0003.matmul.prog3.lua:3", "a script: " .. out)
  eq(n[4], "0004.sum.prog3.lua:4")
  sh("LUMEN_DUMP=" .. d .. "/e.safetensors " .. LUMEN .. " -e 'local x = lm.ones{2} * 3\nprint(x:sum():item())'")
  n = dump_names(d .. "/e.safetensors")
  eq(n[2], "0002.mul.(command line):1", "-e")
  eq(n[3], "0003.sum.(command line):2")
  sh("printf 'local x = lm.ones{2} * 3\\nprint(x:sum():item())\\n' | LUMEN_DUMP=" .. d .. "/i.safetensors " .. LUMEN .. " -")
  n = dump_names(d .. "/i.safetensors")
  eq(n[3], "0003.sum.stdin:2", "stdin")
  -- lumen batch ran every job after the first with the hook cleared: the
  -- nodes of job 2 kept the location of lumen's own batch loop
  write(d .. "/job.lua", "local lm = require 'lumen'\nreturn function(p)\n" ..
        "  local x = lm.rand({3, 8, 8}, {seed = p.seed})\n  return (x * 0.5 + 0.25)\nend\n")
  out = sh("LUMEN_DUMP=" .. d .. "/b.safetensors " .. LUMEN .. " batch " .. d .. "/job.lua --seeds 1-2 --serial -o '"
           .. d .. "/img/%05d.png' --progress off")
  n = dump_names(d .. "/b.safetensors")
  local jobs = 0
  for _, k in ipairs(n) do
    ok(not k:find("l_batch", 1, true) and not k:find("%.%-$"), "every node at the job's lines: " .. k .. "\n" .. out)
    if k:find("%.random_uniform%.job%.lua:3$") or k:find("%.rand%w*%.job%.lua:3$") then jobs = jobs + 1 end
  end
  eq(jobs, 2, "both jobs' rand at job.lua:3: " .. table.concat(n, " "))
  os.execute("rm -rf " .. d)
end)

test("lumen diff pairs by op and location, names what it could not pair, says when it pairs by order", function()
  local d = tmpdir()
  write(d .. "/p.lua", "local dt = os.getenv('DT')\nlocal x = lm.randn({4, 8}, {seed = 1}):astype(dt)\n" ..
        "local w = lm.randn({8, 8}, {seed = 2}):astype(dt)\nlocal h = x:matmul(w):tanh()\n" ..
        "print((h * 3):sum():item())\n")
  sh("DT=f32 LUMEN_DUMP=" .. d .. "/f32.safetensors " .. LUMEN .. " " .. d .. "/p.lua")
  sh("DT=f16 LUMEN_DUMP=" .. d .. "/f16.safetensors " .. LUMEN .. " " .. d .. "/p.lua")
  local out, code = sh(LUMEN .. " diff " .. d .. "/f16.safetensors " .. d .. "/f32.safetensors")
  eq(code, 1, out)
  -- the f16 run has two casts more: the rest pairs at shifted indices
  ok(out:find("0005.matmul.p.lua:4 [^\n]*<%- 0003.matmul.p.lua:4"), "matmul with matmul: " .. out)
  ok(out:find("unpaired: 2 of A's 8 tensors", 1, true) and out:find("0002.cast.p.lua:2", 1, true)
     and out:find("0004.cast.p.lua:3", 1, true), "the casts named without --all: " .. out)
  ok(out:find("DIFF: 8 tensors, %d+ out of tolerance, 2 unpaired"), out)
  -- two unrelated programs: a sum never pairs with a mean
  write(d .. "/one.lua", "local x = lm.ones{4} * 3\nprint(x:sum():item())\n")
  write(d .. "/two.lua", "local x = lm.ones{4} * 3\nprint(x:mean():item())\n")
  sh("cd " .. d .. " && LUMEN_DUMP=one.safetensors " .. ABS_LUMEN .. " one.lua")
  sh("cd " .. d .. " && LUMEN_DUMP=two.safetensors " .. ABS_LUMEN .. " two.lua")
  out, code = sh(LUMEN .. " diff " .. d .. "/one.safetensors " .. d .. "/two.safetensors")
  eq(code, 1, out)
  ok(out:find("unpaired: 3 of A's 3 tensors", 1, true) and out:find("0003.sum.one.lua:2", 1, true), out)
  ok(out:find("unpaired: 3 of B's 3 tensors", 1, true) and out:find("0003.mean.two.lua:2", 1, true), out)
  -- dumps without locations ("-"): same ops pair by order, and the report
  -- says so; the sum and the mean stay apart
  local v = lm.tensor{1, 2, 3}
  lm.save(d .. "/na.safetensors", {["0001.full.-"] = v, ["0002.mul.-"] = v * 2, ["0003.sum.-"] = v:sum()})
  lm.save(d .. "/nb.safetensors", {["0001.full.-"] = v, ["0002.mul.-"] = v * 2, ["0003.mean.-"] = v:sum()})
  out, code = sh(LUMEN .. " diff " .. d .. "/na.safetensors " .. d .. "/nb.safetensors")
  eq(code, 1, out)
  ok(out:find("note: 2 pairs by op and order only", 1, true), out)
  ok(out:find("unpaired: 1 of A's 3 tensors[^\n]*0003%.sum%.%-") and out:find("unpaired: 1 of B's[^\n]*0003%.mean%.%-"), out)
  out, code = sh(LUMEN .. " diff " .. d .. "/na.safetensors " .. d .. "/na.safetensors")
  eq(code, 0, out)
  -- execution order past index 9999: "10000." is after "9999."
  lm.save(d .. "/big.safetensors", {["9999.mul.x.lua:1"] = v, ["10000.mul.x.lua:1"] = v * 2})
  lm.save(d .. "/small.safetensors", {["0001.mul.x.lua:1"] = v, ["0002.mul.x.lua:1"] = v * 2})
  out, code = sh(LUMEN .. " diff " .. d .. "/big.safetensors " .. d .. "/small.safetensors")
  eq(code, 0, "the k-th mul with the k-th: " .. out)
  os.execute("rm -rf " .. d)
end)

-- issue 34 item 7: an evaluated result left nothing to compare, and the
-- report said "0 nodes ... no divergence", ok = true, for an f16 overflow
test("nothing compared is no success: lm.diff and lm.trace say so and why", function()
  local t = (lm.ones{4} * 70000):sum():eval()
  local r = lm.diff(function() return t end, nil, {b = "f16"})
  eq(r.ok, false, "ok")
  eq(r.compared, 0)
  ok(r.reason and r.reason:find("nothing compared: the function returned tensors already evaluated", 1, true), r.reason)
  ok(tostring(r):find("nothing compared", 1, true) and not tostring(r):find("no divergence", 1, true), tostring(r))
  -- the whole graph evaluated inside the function, as pipe:generate does
  local whole = lm.diff(function() local s = (lm.ones{4} * 70000):sum(); s:eval(); return s end, nil, {b = "f16"})
  eq(whole.ok, false)
  ok(whole.reason:find("the result was already evaluated %(%d+ kernels ran inside the function"), whole.reason)
  ok(whole.reason:find("nothing of its graph is left to compare", 1, true), whole.reason)
  -- part of it: the rest is compared, and the report says what was not
  local part = lm.diff(function() local y = lm.ones{4} * 3; y:eval(); return y:sum() end, nil, {b = "f16"})
  eq(part.compared, 1)
  ok(part.ok, "the sum itself matches")
  ok(part.note and part.note:find("^%d+ kernels? ran inside the function"), part.note)
  ok(tostring(part):find("\nnote: %d+ kernels? ran inside"), tostring(part))
  -- a reference no node pairs with
  local p = tmpfile()
  lm.save(p, {unrelated = lm.ones{2}})
  local none = lm.diff(function() return lm.ones{2} * 2 end, nil, {reference = p})
  eq(none.ok, false)
  ok(none.reason:find("none of the graph's 1 node pairs with a tensor of", 1, true), none.reason)
  os.remove(p)
  -- lm.trace writes nothing and says why
  local q = tmpfile()
  raises(function() lm.trace(function() return t end, nil, q) end, "lm.trace: nothing recorded, the function returned")
  eq(io.open(q), nil, "no file written")
  local n, note = lm.trace(function() local y = lm.ones{4} * 3; y:eval(); return y:sum() end, nil, q)
  eq(n, 1)
  ok(note and note:find("^%d+ kernels? ran inside the function"), tostring(note))
  os.remove(q)
  -- :diff on an evaluated value: tests/repl/run.sh (commands need the terminal)
end)

test("lm.diff{images = dir} refuses to write over an earlier diff's heat maps unless overwrite = true", function()
  with_fault("sin:cpu:f64", function()
    local d = tmpdir()
    local opts = {a = {dtype = "f32"}, b = {dtype = "f64"}, rtol = 1e-4, atol = 1e-5, images = d}
    local r = lm.diff(model, {x}, opts)
    ok(r.first_image, "written")
    local f = assert(io.open(r.first_image, "rb"))
    local before = f:read("a")
    f:close()
    raises(function() lm.diff(model, {x}, opts) end, "holds the heat maps of an earlier diff (pass overwrite = true")
    opts.overwrite = true
    local again = lm.diff(model, {x}, opts)
    eq(again.first_image, r.first_image)
    local made = d .. "/new"
    local r2 = lm.diff(model, {x}, {a = {dtype = "f32"}, b = {dtype = "f64"}, rtol = 1e-4, atol = 1e-5, images = made})
    ok(r2.first_image and r2.first_image:find(made, 1, true), "a missing folder is made")
    ok(#before > 0)
    os.execute("rm -rf " .. d)
  end)
end)

-- issue 34 item 12: a table of tensors (a map) was "returned no tensor";
-- LUMEN_DUMP=/dev/null or a folder gave two contradictory messages
test("lm.diff compares every tensor of a returned table, a list or a map", function()
  local function f(a)
    local y = a * 2
    return {image = y + 1, mean = y:mean(), 7}
  end
  local r = lm.diff(f, {lm.tensor{1, 2, 3}}, {b = "f64"})
  ok(r.ok, "ok")
  eq(r.compared, #r.nodes)
  local ops = {}
  for _, nd in ipairs(r.nodes) do ops[nd.op] = true end
  ok(ops.add and ops.mean and ops.mul, "both outputs' graphs")
  local many = lm.diff(function() local t = {}; for i = 1, 300 do t[i] = lm.ones{1} * i end; return t end)
  eq(#many.nodes, 300, "300 outputs, none dropped")
  raises(function() lm.diff(function() return {n = 1}, 2 end) end,
         "lm.diff: the function returned no tensor (2 values, none a tensor nor a table of tensors)")
end)

test("LUMEN_DUMP names what it must be: a new safetensors file", function()
  local d = tmpdir()
  local cases = {
    {"/dev/null", "LUMEN_DUMP=/dev/null is not a regular file"},
    {d, "LUMEN_DUMP=" .. d .. " is a folder: name a file in it, such as " .. d .. "/dump.safetensors"},
  }
  write(d .. "/old.safetensors", "x")
  cases[3] = {d .. "/old.safetensors", "LUMEN_DUMP=" .. d .. "/old.safetensors exists: LUMEN_DUMP names the new safetensors file"}
  for _, c in ipairs(cases) do
    local out = sh("LUMEN_DUMP=" .. c[1] .. " " .. LUMEN .. " -e 'print((lm.ones{2} * 2):sum():item())'")
    ok(out:find(c[2], 1, true), c[1] .. ": " .. out)
    ok(not out:find("overwrite", 1, true) and not out:find("is a directory", 1, true), "one message: " .. out)
    ok(out:find("4.0", 1, true), "the program still runs")
  end
  raises(function() lm.trace(function() return lm.ones{2} * 2 end, nil, d, {overwrite = true}) end,
         "lm.trace: " .. d .. " is a folder")
  os.execute("rm -rf " .. d)
end)

test("lm.diff against a LUMEN_DUMP of the same code pairs node k by op and line, whatever the indices", function()
  local d = tmpdir()
  write(d .. "/m.lua", "return function(x, w)\n  local h = x:matmul(w):tanh()\n  return h * 3 + h\nend\n")
  write(d .. "/run.lua", "local f = dofile(arg[1] .. '/m.lua')\nlocal x = lm.randn({4, 8}, {seed = 1})\n" ..
        "local w = lm.randn({8, 8}, {seed = 2})\nprint(f(x, w):sum():item())\n")
  sh("LUMEN_DUMP=" .. d .. "/ref.safetensors " .. LUMEN .. " " .. d .. "/run.lua " .. d)
  local f = dofile(d .. "/m.lua")
  local x, w = lm.randn({4, 8}, {seed = 1}), lm.randn({8, 8}, {seed = 2})
  local r = lm.diff(f, {x, w}, {reference = d .. "/ref.safetensors"})
  eq(#r.nodes, 4)
  eq(r.compared, 4, "each node paired though the dump counts the randn first")
  ok(r.ok, "the same values")
  eq(r.nodes[1].reference, "0003.matmul.m.lua:2")
  eq(r.nodes[3].reference, "0005.mul.m.lua:3")
  os.execute("rm -rf " .. d)
end)

test("another framework's dump pairs by layer only, never by a coincident op name", function()
  -- tools/torch_dump.py names modules: its "0001.mul.blk" is module blk's
  -- output (class Mul), not Lumen's mul inside scope blk
  local d = tmpdir()
  local x3 = lm.tensor({1, 2, 3}, {dtype = "f32"})
  local function blk(xx)
    lm.name_scope("blk")
    local z = xx * 2 + 1
    lm.name_scope(nil)
    return z
  end
  lm.save(d .. "/torch.safetensors", {["0001.mul.blk"] = x3 * 2 + 1}, {metadata = {writer = "tools/torch_dump.py"}})
  local r = lm.diff(blk, {x3}, {reference = d .. "/torch.safetensors"})
  ok(r.ok, "the module's output is the scope's last node")
  eq(r.nodes[2].reference, "0001.mul.blk")
  eq(r.nodes[1].reference, nil, "Lumen's mul pairs with nothing")
  lm.trace(blk, {x3}, d .. "/lumen.safetensors")
  local out, code = sh(LUMEN .. " diff " .. d .. "/torch.safetensors " .. d .. "/lumen.safetensors")
  eq(code, 0, out)
  ok(out:find("ok: 1 tensors, 0 out of tolerance, 0 unpaired", 1, true), out)
  os.execute("rm -rf " .. d)
end)

test("infinite tolerances pass identical data; NaN and negative ones are refused", function()
  local a = lm.tensor{0, 1, -2.5, 0}
  local r = lm.compare(a, a, {rtol = math.huge})
  eq(r.n_bad, 0, "rtol = math.huge on data with zeros")
  eq(lm.compare(a, a, {rtol = math.huge, atol = math.huge}).n_bad, 0)
  eq(lm.compare(a, a + 1e30, {atol = math.huge}).n_bad, 0, "atol = math.huge accepts every finite pair")
  eq(lm.compare(a, a + 1, {rtol = 0, atol = 0}).n_bad, 4)
  for _, bad in ipairs{{rtol = 0 / 0}, {atol = 0 / 0}, {rtol = -1}, {atol = -1e-9}} do
    local k = next(bad)
    raises(function() lm.compare(a, a, bad) end, "option '" .. k .. "' is")
    raises(function() lm.diff(model, {x}, bad) end, "lm.diff: option '" .. k .. "'")
  end
  local d = tmpfile()
  sh("LUMEN_DUMP=" .. d .. " " .. LUMEN .. " -e 'local x = lm.tensor{0, 1, 2} * 1; print(x:sum():item())'")
  local out, code = sh(LUMEN .. " diff " .. d .. " " .. d .. " --rtol inf --atol inf")
  eq(code, 0, "lumen diff d d --rtol inf --atol inf: " .. out)
  out, code = sh(LUMEN .. " diff " .. d .. " " .. d .. " --rtol nan")
  eq(code, 2)
  ok(out:find("--rtol nan", 1, true) and out:find(">= 0", 1, true), out)
  os.remove(d)
end)

test("ulp distances", function()
  local a = lm.tensor({1, 2, 3, 4}, {dtype = "f32"})
  local h = lm.ulp_hist(a, a:astype("f16"))
  eq(h[1], 4, "f16-exact values are 0 ulp apart")
  local b = a + lm.tensor({0, 0, 0, 2 ^ -7}, {dtype = "f32"})   -- 2 ulps of f16 at 4
  local h2 = lm.ulp_hist(a:astype("f16"), b:astype("f16"))
  eq(h2[1], 3)
  eq(h2[3], 1, "2 ulps")
end)

test("lm.diff errors name the function", function()
  raises(function() lm.diff(function() return 1 end, {}) end, "lm.diff: the function returned no tensor")
  raises(function() lm.diff(model, {x}, {a = {dtype = "f7"}}) end, "unknown dtype")
  raises(function() lm.diff(model, {x}, {bogus = 1}) end, "unknown option")
end)

test("lm.compile verify reports the fused chain that diverges", function()
  local f = lm.compile(function(a)
    local y = a:matmul(w1)
    return ((y * 2 + 1):tanh() - 0.5):sum()
  end, {verify = "error"})
  local a = lm.randn({4, 32}, {seed = 5})
  ok(f(a):item() == f(a):item(), "a clean call passes")
  with_fault("fused:cpu", function()
    local okk, err = pcall(f, a)
    ok(not okk, "raises")
    ok(tostring(err):find("smallest failing chain: mul", 1, true), tostring(err))
    ok(tostring(err):find("tanh", 1, true), "names the ops")
    -- delta debugging: two ops fused are the shortest chain that still fails
    ok(tostring(err):find("smallest failing chain: mul %(test_diff%.lua:%d+%) %-> add %(test_diff%.lua:%d+%) %(of the fused kernel mul"), tostring(err))
  end)
end)

test("a dump from tools/torch_dump.py lines up by layer name (lm.name_scope)", function()
  local p = tmpfile()
  local out, code = sh("python3 tools/torch_dump.py --selftest " .. p)
  if code ~= 0 then
    print("  (python3 missing: torch_dump.py's toy dump skipped) " .. out)
    return
  end
  local function toy(xx)
    lm.name_scope("layer1")
    local y = xx * 2 + 1
    lm.name_scope("layer2")
    local z = y * y
    lm.name_scope(nil)
    return z
  end
  local x3 = lm.tensor({1, 2, 3}, {dtype = "f32"})
  local r = lm.diff(toy, {x3}, {reference = p})
  ok(r.ok, "matches")
  eq(r.nodes[2].reference, "0001.linear.layer1", "layer1's last node")
  eq(r.nodes[3].reference, "0002.square.layer2")
  eq(r.nodes[1].reference, nil, "not a layer's last node")
  local wrong = lm.diff(function(xx) lm.name_scope("layer1"); local y = xx * 2 + 1.5; lm.name_scope("layer2")
    local z = y * y; lm.name_scope(nil); return z end, {x3}, {reference = p})
  eq(wrong.first.where, "layer1")
  os.remove(p)
end)
