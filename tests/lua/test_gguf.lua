-- test_gguf.lua - GGUF files and quantized tensors from Lua (lm.load/lm.save
-- of .gguf, lm.quantize, t:dequantize, printing).
local T, lm = ...
local test, eq, same, raises, ok = T.test, T.eq, T.same, T.raises, T.ok
local GX = "tests/ref/gguf/"
local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp)

test("load gguf: tensors with their dtypes and typed metadata", function()
  local t, meta = lm.load(GX .. "types.gguf", {device = "cpu"})
  eq(t["q.q4_K"].dtype, "q4_k")
  same(t["q.q4_K"].shape, {8, 256})
  same(t.cube.shape, {2, 3, 5})
  eq(meta["t.u8"], 250)
  eq(meta["t.i64"], math.mininteger)
  eq(meta["t.bool"], true)
  eq(meta["general.architecture"], "lumen-test")
  same(meta["a.str"], {"hello", "", "w\xc3\xb6rld"})
  same(meta["a.i32"], {-1, 2, -3, 4})
  eq(math.type(meta["t.f64"]), "float")
end)

test("dequantize equals ggml's values; quantize equals ggml's blocks", function()
  local t = lm.load(GX .. "types.gguf", {device = "cpu"})
  for _, ty in ipairs{"q4_0", "q8_0", "q2_K", "q4_K", "q6_K"} do
    local d = t["q." .. ty]:dequantize()
    eq(d.dtype, "f32")
    ok(lm.compare(d, t["deq." .. ty], {rtol = 0, atol = 0}).ok, ty .. " dequantize")
    local q = lm.quantize(t.src, ty:lower())
    eq(q.dtype, ty:lower())
    ok(lm.compare(q:dequantize(), t["deq." .. ty], {rtol = 0, atol = 0}).ok, ty .. " quantize")
  end
end)

test("quantized tensors refuse other ops and print dequantized", function()
  local q = lm.randn{2, 64}:quantize("q8_0")
  raises(function() return q + 1 end, "dequantize")
  raises(function() return q:reshape{128} end, "q8_0")
  raises(function() lm.randn{2, 30}:quantize("q4_0") end, "stores blocks of 32")
  raises(function() lm.randn{2, 32}:quantize("q9") end, "unknown quantized dtype")
  local s = tostring(q)
  ok(s:find("<tensor q8_0 %[2,64%]") and s:find("dequantized"), s)
end)

test("save gguf round trip: quantized tensors and metadata", function()
  local p = tmp .. "/rt.gguf"
  local w = lm.randn{4, 256}
  local q = w:quantize("q4_k")
  lm.save(p, {w = q, b = lm.ones{3}}, {metadata = {name = "x", n = 7, lr = 0.5, ok = true,
                                                     list = {1, 2, 3}, nested = {{1}, {2, 3}}}})
  local t, meta = lm.load(p)
  eq(t.w.dtype, "q4_k")
  ok(lm.compare(t.w:dequantize(), q:dequantize(), {rtol = 0, atol = 0}).ok, "values")
  eq(meta.name, "x"); eq(meta.n, 7); eq(meta.lr, 0.5); eq(meta.ok, true)
  same(meta.list, {1, 2, 3}); same(meta.nested, {{1}, {2, 3}})
  raises(function() lm.save(tmp .. "/q.safetensors", {w = q}) end, "quantized")
end)

test("x @ w.T with a quantized w is lm.linear(x, w); other products with it refuse", function()
  local w = lm.randn{48, 512}
  for _, ty in ipairs{"q8_0", "q4_k"} do
    local q = w:quantize(ty)
    local x = lm.randn{2, 3, 512}
    local y = lm.matmul(x, q.T)
    same(y.shape, {2, 3, 48})
    ok(lm.compare(y, lm.linear(x, q), {rtol = 0, atol = 0}).ok, ty .. ": matmul(x, w.T) is linear(x, w)")
    ok(lm.compare(x:matmul(q.T), y, {rtol = 0, atol = 0}).ok, ty .. ": x:matmul(w.T)")
    local v = lm.randn{512}
    same(lm.matmul(v, q.T).shape, {48})
    ok(lm.compare(lm.matmul(x, q.T), lm.matmul(x, q:dequantize().T), {atol = 0.05 * 512 ^ 0.5}).ok,
       ty .. ": near the float product")
    eq(q.T.dtype, ty); same(q.T.shape, {512, 48})
    ok(lm.compare(q.T:dequantize(), q:dequantize().T, {rtol = 0, atol = 0}).ok, ty .. ": w.T:dequantize()")
    ok(lm.compare(q.T.T:dequantize(), q:dequantize(), {rtol = 0, atol = 0}).ok, ty .. ": w.T.T")
    raises(function() return lm.matmul(x, q) end, "dequantize")
    raises(function() return lm.matmul(q, x) end, "dequantize")
    raises(function() return q.T + 1 end, "dequantize")
    raises(function() return q.T:reshape{48 * 512} end, "dequantize")
    raises(function() return q.T:contiguous() end, "dequantize")
    local sq = lm.randn{512, 512}:quantize(ty)   -- square: w.T fits linear's shapes, yet is refused
    raises(function() return lm.linear(x, sq.T) end, "transpose")
  end
end)

test("quantized linear on the CPU: NaN rows stay NaN, huge rows stay finite, one-row w.T", function()
  for _, ty in ipairs{"q8_0", "q4_0", "q4_k"} do
    local K = ty == "q4_k" and 256 or 64
    local q = lm.randn({3, K}, {seed = 4}):quantize(ty)
    local wf = q:dequantize()
    local rows = lm.randn({2, K}, {seed = 5}):totable()
    rows[1][5] = 0 / 0
    local y = lm.linear(lm.tensor(rows), q, nil):to("cpu"):totable()
    ok(y[1][1] ~= y[1][1] and y[1][3] ~= y[1][3], ty .. ": a NaN in a row of x gives NaN (as f32)")
    ok(y[2][1] == y[2][1], ty .. ": the other row is finite")
    local big = lm.randn({2, K}, {seed = 6}) * 1e7
    local yq, yf = lm.linear(big, q, nil):totable(), lm.linear(big, wf, nil):totable()
    for i = 1, 2 do for n = 1, 3 do
      ok(yq[i][n] == yq[i][n] and math.abs(yq[i][n]) < math.huge, ty .. ": x*1e7 gives a finite result")
      -- the activations' 8-bit error, as for unit inputs above, times 1e7
      ok(math.abs(yq[i][n] - yf[i][n]) <= 0.05 * K ^ 0.5 * 1e7, ty .. ": near f32's")
    end end
    -- the format's scales are f16: values they cannot hold are refused
    raises(function() return lm.full({2, K}, 3e38):quantize(ty) end, "f16 block scale")
    -- a one-row weight's transpose [K, 1]
    local q1 = lm.randn({1, K}, {seed = 7}):quantize(ty)
    local x = lm.randn({3, K}, {seed = 8})
    local y1 = x:matmul(q1.T)
    same(y1.shape, {3, 1})
    ok(lm.compare(y1, lm.linear(x, q1), {rtol = 0, atol = 0}).ok, ty .. ": x:matmul(w.T), one row")
  end
end)

test("an empty quantized tensor dequantizes (fuzz_gguf: it recursed until the stack ran out)", function()
  local t = lm.load("tests/fuzz/regress/gguf/empty-quantized-view-recursion")
  eq(t.h.dtype, "q8_0")
  local d = t.h:dequantize()
  eq(d.size, 0)
  same(d.shape, t.h.shape)
end)

test("a q4_k weight takes 4.5 bits per element (144 bytes per 256), q8_0 8.5", function()
  local w = lm.randn{64, 1024, device = "cpu"}
  w:eval()   -- its own f32 buffer first, so the growth below is q's alone
  collectgarbage(); collectgarbage()
  local before = lm.memory("cpu").active
  local q = w:quantize("q4_k")
  collectgarbage(); collectgarbage()
  local grew = lm.memory("cpu").active - before
  eq(q.nbytes, 64 * 1024 // 256 * 144)
  eq(q.nbytes * 8 / (64 * 1024), 4.5)
  eq(w:quantize("q8_0").nbytes * 8 / (64 * 1024), 8.5)
  -- lm.memory counts the buffer's allocation, its size class (4 per power of two) at most 25% above
  ok(grew >= q.nbytes and grew <= q.nbytes * 1.25, "active grew by " .. grew .. " for " .. q.nbytes .. " bytes")
end)

local LUMEN = (os.getenv("BUILD") or "build") .. "/lumen"   -- the VULKAN=0 pass runs build/novk

test("lumen convert --quantize writes a GGUF of quantized weights", function()
  local src = tmp .. "/w.safetensors"
  lm.save(src, {w = lm.randn{4, 64}, b = lm.randn{4}}, {metadata = {note = "hi"}})
  local out = tmp .. "/w.gguf"
  local okx = os.execute(LUMEN .. " convert --quantize q8_0 " .. src .. " " .. out .. " >/dev/null")
  ok(okx, "convert ran")
  local t, meta = lm.load(out)
  eq(t.w.dtype, "q8_0"); eq(t.b.dtype, "f32")
  eq(meta.note, "hi"); eq(meta["lumen.quantize"], "q8_0")
  ok(not os.execute(LUMEN .. " convert --quantize q8_0 " .. src .. " " .. out .. " 2>/dev/null"),
     "an existing output is not replaced")
end)

os.execute("rm -rf " .. tmp)
