-- test_io.lua - files, images and comparison from Lua (lua/l_io.c).
local T, lm = ...
local test, eq, same, raises, ok = T.test, T.eq, T.same, T.raises, T.ok
local FX = "tests/ref/fixtures/io/"
local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp)

test("load safetensors: table of tensors and metadata", function()
  local t, meta = lm.load(FX .. "st_all.safetensors")
  eq(t.f32.dtype, "f32")
  same(t.i8.shape, {2, 3})
  same(t.u8:totable(), {{0, 1, 2}, {3, 128, 255}})
  eq(meta.format, "pt")
  eq(t.scalar:item(), 7.25)
end)

test("load npy gives the tensor, npz a table", function()
  local y = lm.load(FX .. "torch_y.npy")
  same(y.shape, {4, 3})
  local d = lm.load(FX .. "npz_deflated.npz")
  same(d.b:totable(), {1, -2, 3, -4})
end)

test("save and load round trip with metadata", function()
  local p = tmp .. "/rt.safetensors"
  local w = lm.arange(6):reshape{2, 3}
  lm.save(p, {w = w, b = lm.ones{3, 2}, n = 5}, {metadata = {step = "10", lr = 0.5}})
  local t, meta = lm.load(p)
  same(t.w:totable(), w:totable())
  eq(t.w.dtype, w.dtype)
  eq(t.n:item(), 5)
  eq(meta.step, "10")
  eq(meta.lr, "0.5")
  lm.save(tmp .. "/rt.npz", {w = w}, {compress = true})
  same(lm.load(tmp .. "/rt.npz").w:totable(), w:totable())
  lm.save(tmp .. "/one.npy", w)
  same(lm.load(tmp .. "/one.npy"):totable(), w:totable())
  raises(function() lm.save(tmp .. "/x.weird", {w = w}) end, "unknown format")
  raises(function() lm.save(tmp .. "/x.npy", {w = w}) end, "holds one tensor")
end)

test("compare report fields and text", function()
  local a = lm.tensor({1, 2, 3, 4}, "f64")
  local b = lm.tensor({1, 2, 3.5, 4}, "f64")
  local r = lm.compare(a, b)
  eq(r.ok, false)
  eq(r.max_abs, 0.5)
  eq(r.n_bad, 1)
  same(r.worst_index, {3})
  eq(r.worst_b, 3.5)
  ok(tostring(r):find("MISMATCH", 1, true), "tostring")
  ok(lm.compare(a, a).ok, "identical")
  ok(lm.compare(a, b, {atol = 1}).ok, "atol")
  eq(lm.compare(a, lm.zeros{2}).shape_equal, false)
  eq(lm.allclose(a, a + 1e-9), true)
  eq(lm.allclose(a, b), false)
end)

test("compare_file by name", function()
  local ref = lm.load(FX .. "torch_dump.npz")
  local r = lm.compare_file(FX .. "torch_dump.npz", {y = ref.y, x = ref.x + 1e-3})
  eq(r.ok, false)
  eq(r.tensors.y.ok, true)
  eq(r.tensors.x.ok, false)
  same(r.missing, {"w"})
  ok(tostring(r):find("1 mismatched", 1, true), "summary")
  ok(lm.compare_file(FX .. "torch_dump.npz", {y = ref.y}, {only = "y"}).ok, "only")
  local none = lm.compare_file(FX .. "torch_dump.npz", {y = ref.y}, {only = "nomatch"})
  ok(not none.ok and none.reason == 'nothing compared: only "nomatch" selects no name on either side', tostring(none.reason))
end)

test("images: write, read, grid, diff", function()
  local img = lm.full({3, 4, 5}, 0.5)
  local p = tmp .. "/img.png"
  lm.image.write_png(p, img, {text = {Software = "lumen"}})
  local back, text = lm.image.read_png(p)
  same(back.shape, {3, 4, 5})
  eq(back.dtype, "u8")
  eq(back[1][1][1]:item(), 128)
  eq(text.Software, "lumen")
  local hwc = lm.image.read_png(p, {layout = "HWC", dtype = "f32"})
  same(hwc.shape, {4, 5, 3})
  eq(lm.image.write_png(tmp .. "/b_%d.png", lm.zeros{2, 1, 3, 3}), 2)
  local g = lm.image.grid({img, img, img}, {nrow = 2, pad = 1})
  same(g.shape, {3, 11, 13})
  local s = lm.image.diff(img, img * 0.5, tmp .. "/diff.png")
  ok(math.abs(s.max - 0.25) < 1e-6, "diff max")
  raises(function() lm.image.write_png(p, lm.zeros{5, 2, 2}) end, "5 channels")
end)

test("image.rgb: an init image as lumen generate reads it (RGB kept, alpha dropped, gray repeated)", function()
  local rgba = lm.arange(4 * 2 * 3):reshape{4, 2, 3}:astype("f32")
  local r = lm.image.rgb(rgba)
  same(r.shape, {3, 2, 3}); eq(r.dtype, "f32")
  eq((r - rgba:slice(1, 1, 3)):abs():max():item(), 0)
  local ga = lm.arange(2 * 2 * 3):reshape{2, 2, 3}   -- gray and alpha
  local g = lm.image.rgb(ga)
  same(g.shape, {3, 2, 3}); eq(g.dtype, ga.dtype)
  for c = 1, 3 do eq((g:slice(1, c, c) - ga:slice(1, 1, 1)):abs():max():item(), 0, "channel " .. c) end
  same(lm.image.rgb(lm.ones{1, 4, 5}).shape, {3, 4, 5})
  -- the PNG path batch_generate.lua reads an init by: a gray+alpha file
  local p = tmp .. "/ga.png"
  lm.image.write_png(p, ga:astype("u8"))
  eq((lm.image.rgb((lm.image.read_png(p, {dtype = "f32"}))) * 255 - g:astype("f32")):abs():max():item(), 0)
  raises(function() lm.image.rgb(lm.zeros{5, 2, 2}) end, "image.rgb: an image is [C,H,W] with 1-4 channels, got [5,2,2]")
  raises(function() lm.image.rgb(lm.zeros{4, 4}) end, "1-4 channels, got [4,4]")
end)

test("bad files raise errors naming the file", function()
  raises(function() lm.load(FX .. "bad_st_overlap.safetensors") end, "overlap")
  raises(function() lm.load("/nonexistent.npy") end, "cannot open")
end)

test("loaded tensors belong to the default device; device= keeps them elsewhere", function()
  local p = tmp .. "/place.safetensors"
  lm.save(p, {w = lm.arange(4):astype("f32")})
  local def = lm.device()
  eq(lm.load(p).w.device, def)
  local c = lm.load(p, {device = "cpu"})
  eq(c.w.device, "cpu")
  same(c.w:totable(), {0, 1, 2, 3})
  raises(function() lm.load(p, {device = "tpu"}) end, "load: option 'device': no device 'tpu'")
  -- with a Vulkan device as the default, a host tensor and a device tensor
  -- meet on the device in either order, and the upload happens once
  local vk
  for _, d in ipairs(lm.devices()) do if d.backend == "vulkan" and not vk then vk = d.spec end end
  if not vk then return end
  lm.device(vk)
  local ok_, err = pcall(function()
    local w = lm.load(p).w
    eq(w.device, vk)
    local h = lm.load(p, {device = "cpu"}).w
    local r = lm.arange(4):astype("f32")
    eq((h + r).device, vk)
    eq((r + h).device, vk)
    eq((h * 2).device, "cpu")
    same((w + r):totable(), {0, 2, 4, 6})
    same((r + h):totable(), {0, 2, 4, 6})
  end)
  lm.device(def)
  assert(ok_, err)
end)

test("a table of many tensors saves and loads (Lua stack grows as needed)", function()
  -- 400 entries, half given as plain numbers that lm.save converts: each
  -- keeps a value on the Lua stack while the file is written
  local t = {}
  for i = 1, 400 do t[string.format("w%03d", i)] = i % 2 == 0 and lm.full({2}, i) or i end
  local p = tmp .. "/many.safetensors"
  lm.save(p, t)
  local back = lm.load(p)
  local n = 0
  for _ in pairs(back) do n = n + 1 end
  eq(n, 400)
  same(back.w400:totable(), {400, 400})
  eq(back.w399:item(), 399)
  local imgs = {}
  for i = 1, 300 do imgs[i] = {{{i / 300}}} end
  same(lm.image.grid(imgs, {nrow = 30, pad = 0}).shape, {1, 10, 30})
end)

test("remove the temporary files", function()
  ok(os.execute("rm -rf '" .. tmp .. "'"), "rm")
end)
