-- test_options.lua - one rule for options and arguments (lua/l_args.c,
-- lua/l_doc.c): every function of lm (and of lm.image, lm.optim, lm.data)
-- and every tensor or model method that takes an options table rejects an unknown
-- option name with an error naming the function and the option; a call
-- with more positional arguments than a function takes is an error naming
-- it.  The walk goes over every documented name (lm.docs()), so a new
-- function is covered the day it is registered.  Also: lm.save(png,
-- {bits=16}) writes a real 16-bit PNG (checked with PIL), x:gelu's
-- approximate against PyTorch's values, lm.clock and lm.sync.
local T, lm = ...
local test, eq, ok, raises, near = T.test, T.eq, T.ok, T.raises, T.near

local BAD = "zz_unknown"
local TMP = os.tmpname()
os.remove(TMP)
local function tmp(ext) return TMP .. ext end

-- the first bracket group of a docstring's first line: its signature
local function signature(doc)
  local first = doc:match("^[^\n]*")
  local at = first:find("[({]")
  if not at then return "" end
  return doc:match(first:sub(at, at) == "(" and "%b()" or "%b{}", at) or ""
end

-- objects whose methods are documented as "kind:name": a tensor, a model
local model = lm.models.load("tests/ref/fixtures/tfjs/model.json")
local receivers = {t = lm.zeros{1}, model = model}
-- the leading arguments of a method call (self first)
local leading = {
  t = function() return {lm.rand{1, 2, 4, 4}} end,
  model = function() return {model, lm.rand{3, 4, 4}} end,
}

-- the documented functions: full name -> {fn =, doc =, sig =, recv =}
local function documented()
  local out = {}
  for name, doc in pairs(lm.docs()) do
    local fn
    local kind, method = name:match("^(%w+):([%w_]+)$")
    if kind then
      fn = receivers[kind] and receivers[kind][method]
    else
      fn = {lm = lm}   -- lm is no global under stock lua5.4
      for part in name:gmatch("[^.]+") do fn = type(fn) == "table" and fn[part] or nil end
    end
    -- lm.exp is t:exp: the docstring says how it is called
    out[name] = {fn = fn, doc = doc, sig = signature(doc), recv = doc:match("^(%w+):")}
  end
  return out
end

local function short(name) return name:match("[%w_]+$") end
local function variadic(e) return e.sig:find("...", 1, true) ~= nil and lm._arity(e.fn) == nil end
-- the NN functions read PyTorch-style arguments (lua/l_nnargs.c): every one
-- takes an options table, and counts its positional arguments itself
local function nn_style(e) return lm._arity(e.fn) == nil and not variadic(e) end
local function takes_options(e)
  return nn_style(e) or e.sig:find("{%s*[%a_]+%s*=") ~= nil or e.sig:find("opts", 1, true) ~= nil
end

local img = lm.tensor{{{0, 0.5}, {0.25, 1}}}
local png = tmp(".png")
lm.save(png, img)
-- the arguments before the options table, for the functions that are
-- neither tensor methods nor NN functions (those take a tensor first)
local function x4() return lm.rand{1, 2, 4, 4} end
local recipes = {
  ["lm.tensor"] = function() return {{1, 2}} end,
  ["lm.zeros"] = function() return {{2}} end,
  ["lm.ones"] = function() return {{2}} end,
  ["lm.full"] = function() return {{2}, 1} end,
  ["lm.arange"] = function() return {3} end,
  ["lm.linspace"] = function() return {0, 1, 3} end,
  ["lm.eye"] = function() return {2} end,
  ["lm.rand"] = function() return {{2}} end,
  ["lm.randn"] = function() return {{2}} end,
  ["lm.set_printoptions"] = function() return {} end,
  ["lm.save"] = function() return {tmp(".safetensors"), img} end,
  ["lm.load"] = function() return {png} end,
  ["lm.compare"] = function() return {img, img} end,
  ["lm.compare_file"] = function() return {png, {a = img}} end,
  ["lm.allclose"] = function() return {img, img} end,
  ["lm.compile"] = function() return {function(a) return a end} end,
  ["lm.diff"] = function() return {function(a) return a * 2 end, {img}} end,
  ["lm.trace"] = function() return {function(a) return a * 2 end, {img}, tmp("_t.safetensors")} end,
  ["lm.image.write_png"] = function() return {tmp("_w.png"), img} end,
  ["lm.image.read_png"] = function() return {png} end,
  ["lm.image.grid"] = function() return {{img}} end,
  ["lm.image.xyz_grid"] = function() return {{lm.zeros{3, 4, 4}}} end,
  ["lm.image.diff"] = function() return {img, img, tmp("_d.png")} end,
  ["lm.show"] = function() return {img} end,
  ["lm.grad"] = function() return {function(a) return a:sum() end} end,
  ["lm.value_and_grad"] = function() return {function(a) return a:sum() end} end,
  ["lm.optim.sgd"] = function() return {} end,
  ["lm.optim.adamw"] = function() return {} end,
  ["lm.data.batches"] = function() return {{lm.zeros{4, 2}}, 2} end,
  ["lm.batch"] = function() return {} end,
  ["lm.profile"] = function() return {} end,   -- the options table comes first
  ["lm.models.load"] = function() return {"tests/ref/fixtures/tfjs/model.json"} end,
  ["lm.diffusion.encode"] = function()
    return {lm.diffusion.tokenizer("tests/ref/clip/tiny/tokenizer"), "a cat"}
  end,
  ["lm.diffusion.text_encoder"] = function() return {"tests/ref/clip/tiny/text_encoder"} end,
  -- the options are checked before the model is read or the pipeline used
  ["lm.diffusion.pipeline"] = function() return {"tests/ref/clip/tiny"} end,
  ["lm.diffusion.generate"] = function() return {false} end,
  ["lm.diffusion.encode_prompt"] = function()
    return {lm.diffusion.pipeline("tests/ref/diffusion/sd1", {dtype = "f32", device = "cpu"}), "a cat"}
  end,
  -- the options are checked before the file is read
  ["lm.diffusion.load_lora"] = function()
    return {lm.diffusion.pipeline("tests/ref/diffusion/sd1", {dtype = "f32", device = "cpu"}), "none.safetensors"}
  end,
  ["lm.models.upscale"] = function()
    return {lm.models.load("tests/ref/fixtures/tfjs/model.json"), lm.rand{3, 4, 4}}
  end,
}

-- calls e with its leading arguments and then the extra values
local function call(name, e, ...)
  local args
  if e.recv then args = leading[e.recv]()
  elseif nn_style(e) then args = {x4()}
  else
    local r = recipes[name]
    if not r then return false, "no recipe" end
    args = r()
  end
  local n = #args
  for i = 1, select("#", ...) do args[n + i] = select(i, ...) end
  return pcall(e.fn, table.unpack(args, 1, n + select("#", ...)))
end

test("every function taking an options table rejects an unknown option, naming both", function()
  local checked, problems = 0, {}
  for name, e in pairs(documented()) do
    if type(e.fn) ~= "function" then
      problems[#problems + 1] = name .. ": documented but not a function"
    elseif takes_options(e) then
      local okc, msg = call(name, e, {[BAD] = 1})
      msg = tostring(msg)
      if msg == "no recipe" then
        problems[#problems + 1] = name .. ": takes options but test_options.lua has no recipe for it"
      elseif okc then
        problems[#problems + 1] = name .. ": accepted option '" .. BAD .. "'"
      elseif not (msg:find(short(name), 1, true) and msg:find("unknown option '" .. BAD .. "'", 1, true)) then
        problems[#problems + 1] = name .. ": error does not name it and the option: " .. msg
      else
        checked = checked + 1
      end
    end
  end
  table.sort(problems)
  eq(table.concat(problems, "\n"), "", "problems")
  ok(checked >= 90, "walked " .. checked .. " functions")   -- lm.* and t:* of ~50 NN and op functions
end)

test("every function of lm and its tables is documented (so the walks see it)", function()
  local docs, missing = lm.docs(), {}
  local function walk(tbl, prefix)
    for k, v in pairs(tbl) do
      local name = prefix .. k
      if type(v) == "function" and not docs[name] then missing[#missing + 1] = name end
      if type(v) == "table" and prefix == "lm." then walk(v, name .. ".") end
    end
  end
  walk(lm, "lm.")
  table.sort(missing)
  eq(table.concat(missing, " "), "", "undocumented")
end)

test("more positional arguments than a function takes is an error naming it", function()
  local checked, problems = 0, {}
  -- the variadic ones check the values after their varargs themselves
  local variadic_cases = {
    ["lm.zeros"] = function() return lm.zeros({2}, "f32", 1) end,
    ["lm.ones"] = function() return lm.ones(2, 3, {}, 1) end,
    ["lm.rand"] = function() return lm.rand({2}, {seed = 1}, 1) end,
    ["lm.randn"] = function() return lm.randn(2, {}, "x") end,
    ["t:reshape"] = function() return lm.zeros{4}:reshape({2, 2}, 1) end,
    ["t:view"] = function() return lm.zeros{4}:view({2, 2}, 1) end,
    ["t:permute"] = function() return lm.zeros{2, 3}:permute({2, 1}, 1) end,
    ["t:broadcast_to"] = function() return lm.zeros{1}:broadcast_to({3}, 1) end,
  }
  for name, e in pairs(documented()) do
    if type(e.fn) == "function" then
      local okc, msg
      local arity = lm._arity(e.fn)
      if arity then
        local args = {}
        for i = 1, arity + 1 do args[i] = true end
        okc, msg = pcall(e.fn, table.unpack(args, 1, arity + 1))
      elseif nn_style(e) then
        okc, msg = call(name, e, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil)
      elseif variadic_cases[name] or variadic_cases[name:gsub("^lm%.", "t:")] then
        okc, msg = pcall(variadic_cases[name] or variadic_cases[name:gsub("^lm%.", "t:")])
      elseif name ~= "lm.eval" and name ~= "lm.async_eval" and name ~= "lm.profile" then   -- lm.profile passes its extra values to fn
        problems[#problems + 1] = name .. ": variadic without a case here"
      end
      if okc ~= nil then
        msg = tostring(msg)
        if okc or not (msg:find(short(name), 1, true) and msg:find("too many arguments", 1, true)) then
          problems[#problems + 1] = name .. ": " .. (okc and "accepted extra arguments" or msg)
        else
          checked = checked + 1
        end
      end
    end
  end
  table.sort(problems)
  eq(table.concat(problems, "\n"), "", "problems")
  ok(checked >= 250, "walked " .. checked .. " functions")
end)

test("argument counts: the limits are the signatures', and in the message", function()
  raises(function() lm.zeros{3}:sum(1, {}, true) end, "t:sum: too many arguments (3 given, at most 2)")
  raises(function() lm.sum(lm.zeros{3}, 1, {}, true) end, "lm.sum: too many arguments (4 given, at most 3)")
  raises(function() lm.image.write_png(png, img, {}, 1) end, "lm.image.write_png: too many arguments")
  raises(function() lm.conv2d(x4(), lm.rand{2, 2, 1, 1}, nil, 1, 0, 1, 1, 1) end, "conv2d: too many arguments")
  raises(function() lm.allclose(img, img, 1e-5, 1e-8, false, 1) end, "lm.allclose: too many arguments")
  raises(function() lm.optim.cosine_decay(1, 10, 0, 5) end, "lm.optim.cosine_decay: too many arguments")
  -- model:upscale is lm.models.upscale(model, ...): the error names that
  raises(function() model:upscale(lm.rand{3, 4, 4}, {}, 1) end, "lm.models.upscale: too many arguments (4 given, at most 3)")
  -- a method of another kind of object counts self too
  eq(model:upscale(lm.rand{3, 4, 4}, {tile = 0}).shape[2], 8)
  -- what the signatures allow still works
  eq(lm.zeros(2, 3, {dtype = "i32"}).dtype, "i32")
  eq(lm.arange(1, 7, 2, {dtype = "f32"}):totable()[3], 5)
  eq(lm.zeros{2, 3}:sum(2, true).ndim, 2)
  eq(lm.zeros{4}:reshape(2, 2).ndim, 2)
  ok(lm.allclose(lm.tensor{1}, lm.tensor{1.001}, 0, 0.01))
  ok(lm.allclose(lm.tensor{1}, lm.tensor{1.001}, {atol = 0.01}))
  ok(not lm.allclose(lm.tensor{1}, lm.tensor{1.001}))
  ok(lm.allclose(lm.tensor{0 / 0}, lm.tensor{0 / 0}, {equal_nan = true}), "equal_nan by name")
end)

test("options of the wrong kind are errors naming the function", function()
  raises(function() lm.save(tmp(".npy"), img, {bits = 16}) end, "lm.save: unknown option 'bits' (known: format)")
  raises(function() lm.save(tmp(".npz"), {a = img}, {metadata = {}}) end, "lm.save: unknown option 'metadata'")
  raises(function() lm.save(tmp(".safetensors"), {a = img}, {compress = true}) end, "unknown option 'compress'")
  raises(function() lm.save(tmp(".png"), img, {bitz = 16}) end,
         "lm.save: unknown option 'bitz' (known: format, layout, range, bits, level, text)")
  raises(function() lm.zeros{3}:sum(1, 2) end, "sum: argument 3 must be an options table, got number")
  raises(function() lm.compare(img, img, "strict") end, "lm.compare: argument 3 must be an options table")
  raises(function() lm.zeros({2}, {[1] = "f32"}) end, "lm.zeros: option names must be strings")
  raises(function() lm.var(lm.zeros{3}, 1, {keepdims = true, ddf = 1}) end, "(known: keepdims, ddof)")
  raises(function() lm.grad(function(a) return a:sum() end, {argnum = 1}) end,
         "grad: unknown option 'argnum' (known: argnums)")
  -- a known option of the wrong type names the function too (never silently true)
  raises(function() lm.zeros{3}:sum(1, {keepdims = "false"}) end, "sum: option 'keepdims' must be a boolean, got string")
  raises(function() lm.compile(function(a) return a end, {cache = "big"}) end, "lm.compile: option 'cache' must be an integer")
  raises(function() lm.randn({2}, {std = "wide"}) end, "lm.randn: option 'std' must be a number")
  raises(function() lm.set_printoptions{precision = 1.5} end, "lm.set_printoptions: option 'precision' must be an integer")
  -- every known name still works
  eq(lm.zeros{2, 3}:var(2, {keepdims = true, ddof = 1}).shape[2], 1)
  eq(lm.rand({2}, {seed = 1, low = 2, high = 3, dtype = "f64"}).dtype, "f64")
  lm.set_printoptions{precision = 4, threshold = 1000, edgeitems = 3, linewidth = 80}
end)

-- reads the PNG header: bit depth and colour type (IHDR bytes 25, 26)
local function png_header(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read(26)
  f:close()
  eq(s:sub(13, 16), "IHDR", "IHDR")
  return s:byte(25), s:byte(26)
end

test("lm.save(png, t, {bits = 16}) writes a 16-bit PNG whose values round-trip", function()
  local path = tmp("_16.png")
  local px = lm.tensor({{{0, 1, 256}, {4095, 32768, 65535}}}, {dtype = "i32"})
  lm.save(path, px, {bits = 16})
  local depth, colour = png_header(path)
  eq(depth, 16, "bit depth")
  eq(colour, 0, "grey")
  T.same(lm.load(path):totable(), px:totable(), "read back")
  -- an independent reader
  local p = io.popen("/usr/bin/python3 -c 'import sys, numpy as np; from PIL import Image; "
    .. "a = np.array(Image.open(sys.argv[1])); print(a.dtype.itemsize * 8 if a.dtype != np.int32 else 32, "
    .. "a.tolist())' " .. path .. " 2>&1")
  local out = p:read("a")
  p:close()
  ok(out:find("[[0, 1, 256], [4095, 32768, 65535]]", 1, true), "PIL reads the values: " .. out)
  -- floats: range 0..1 maps to 0..65535; the default stays 8 bits
  lm.save(path, lm.tensor{{{0, 1}}}, {bits = 16, range = {0, 1}})
  T.same(lm.load(path):totable(), {{{0, 65535}}}, "float range")
  lm.save(path, lm.tensor{{{0, 1}}})
  eq((png_header(path)), 8, "default depth")
  T.same(lm.load(path):totable(), {{{0, 255}}}, "8-bit values")
  raises(function() lm.save(path, img, {bits = 12}) end, "bits must be 8 or 16")
  os.remove(path)
end)

test("x:gelu{approximate=} against PyTorch; a positional string is an error", function()
  local FX = "tests/ref/fixtures/core/"
  local x = lm.load(FX .. "x.npy")
  local exact, tanh = lm.load(FX .. "unary_gelu.npy"), lm.load(FX .. "unary_gelu_tanh.npy")
  ok(lm.compare(x:gelu(), exact).max_abs < 1e-12, "gelu() is erf GELU")
  ok(lm.compare(x:gelu{approximate = "none"}, exact).max_abs < 1e-12, "none")
  ok(lm.compare(x:gelu{approximate = "tanh"}, tanh).max_abs < 1e-12, "tanh")
  ok(lm.compare(lm.gelu(x, {approximate = "tanh"}), tanh).max_abs < 1e-12, "lm.gelu")
  -- f32 on every device (Vulkan: lavapipe here) against the same values
  for _, d in ipairs(lm.devices()) do
    local xf = x:astype("f32"):to(d.spec)
    ok(lm.compare(xf:gelu{approximate = "tanh"}:astype("f64"), tanh).max_abs < 2e-6, d.spec .. " tanh")
    ok(lm.compare(xf:gelu{approximate = "none"}:astype("f64"), exact).max_abs < 2e-6, d.spec .. " none")
  end
  -- the two forms differ enough here that a silent mix-up would show
  ok(lm.compare(exact, tanh).max_abs > 1e-4, "fixtures differ")
  -- f32, by hand: 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) at x = 1
  near(lm.tensor{1}:gelu{approximate = "tanh"}:item(),
       0.5 * (1 + math.tanh(math.sqrt(2 / math.pi) * (1 + 0.044715))), 1e-6, "hand formula")
  raises(function() x:gelu("tanh") end, 'gelu: approximate is given by name: x:gelu{approximate = "tanh"}')
  raises(function() x:gelu{approximate = "fast"} end, 'gelu: approximate must be "none" or "tanh"')
  raises(function() x:gelu{approximate = true} end, 'gelu: approximate must be "none" or "tanh", got boolean')
  raises(function() x:gelu{approx = "tanh"} end, "gelu: unknown option 'approx' (known: approximate)")
end)

test("lm.clock is a monotonic wall clock; lm.sync waits for the devices", function()
  local t0 = lm.clock()
  eq(math.type(t0), "float")
  local y = lm.rand{64, 64}:matmul(lm.rand{64, 64}):eval()
  lm.sync()
  -- on every device (Vulkan: lavapipe here), work then a wait for its queue
  for _, d in ipairs(lm.devices()) do
    local a = lm.rand({32, 32}, {seed = 1, device = d.spec})
    local z = a:matmul(a):sum()
    lm.sync(d.spec)
    near(z:item(), lm.rand({32, 32}, {seed = 1}):matmul(lm.rand({32, 32}, {seed = 1})):sum():item(), 1e-4, d.spec)
    lm.sync(d.spec)
  end
  local t1 = lm.clock()
  ok(t1 >= t0, "monotonic")
  ok(t1 - t0 < 3600, "seconds, not a raw counter")
  eq(y.shape[1], 64)
  raises(function() lm.sync("nosuchdevice") end, "nosuchdevice")
  raises(function() lm.clock(1) end, "lm.clock: too many arguments")
end)

for _, ext in ipairs{".png", ".safetensors", "_w.png", "_d.png"} do os.remove(tmp(ext)) end

-- the second sweep of issue 23: a value of the wrong type inside an
-- options table or a size list said "bad argument #-1", an argument the
-- user never wrote
test("a dtype option or a reshape size of the wrong type names it", function()
  raises(function() lm.ones({2}, {dtype = {}}) end, "dtype must be a name (f32 f16 bf16 f64 i8 u8 i16 i32 i64 bool), not a table")
  raises(function() lm.zeros{2, dtype = true} end, "i64 bool), not a boolean")
  raises(function() lm.tensor{1, 2}:view("a") end, "reshape: size 1 must be an integer, not a string")
  raises(function() lm.tensor{1, 2}:reshape{1, 2.5} end, "reshape: size 2 must be an integer, not 2.5")
  local ok1, e1 = pcall(lm.ones, {2}, {dtype = {}})
  ok(not ok1 and not tostring(e1):find("#-1", 1, true), "no argument #-1 in " .. tostring(e1))
  local sh = lm.tensor{1, 2}:reshape{1, 2.0}.shape
  ok(sh[1] == 1 and sh[2] == 2, "reshape{1, 2.0} is [1,2]")
end)
