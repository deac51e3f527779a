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
