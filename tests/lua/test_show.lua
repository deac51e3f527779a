-- test_show.lua - lm.show and lm.show_protocol (lua/l_show.c, lua/term_image.c):
-- the encodings of each protocol, the pixels (lm.save's conversion) read
-- back from the half blocks, nothing printed when stdout is not a
-- terminal, and the refusals.  The terminals themselves: tests/show/run.sh.
local T, lm = ...
local test, eq, raises, ok = T.test, T.eq, T.raises, T.ok
local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp)

-- the distinct truecolor colours of a half-block string
local function colours(s)
  local set, n = {}, 0
  for r, g, b in s:gmatch("\27%[[34]8;2;(%d+);(%d+);(%d+)m") do
    local k = r .. "," .. g .. "," .. b
    if not set[k] then set[k] = true; n = n + 1 end
  end
  return set, n
end
local function blocks(t, opts)
  opts = opts or {}
  opts.protocol, opts.string = "blocks", true
  return lm.show(t, opts)
end
local function solid(s, rgb, what)
  local set, n = colours(s)
  ok(set[rgb] and n == 1, what .. ": one colour " .. rgb .. ", got " .. n .. ": " .. next(set or {}, nil) or "none")
end

test("lm.show: each protocol's sequences", function()
  local t = lm.rand{3, 16, 16, seed = 1}
  ok(blocks(t):find("\u{2584}") or blocks(t):find("\u{2580}"), "half blocks")
  eq(lm.show(t, {protocol = "sixel", string = true}):sub(1, 2), "\27P")
  eq(lm.show(t, {protocol = "kitty", string = true}):sub(1, 3), "\27_G")
  eq(lm.show(t, {protocol = "iterm", string = true}):sub(1, 12), "\27]1337;File=")
  eq(lm.show(t, {protocol = "off", string = true}), false)
end)

test("lm.show: the pixels are lm.save's, for every dtype and layout", function()
  local c = {10, 200, 30}
  local function chw(dt, scale)
    local t = {}
    for k = 1, 3 do
      t[k] = {}
      for y = 1, 8 do t[k][y] = {}; for x = 1, 8 do t[k][y][x] = c[k] * scale end end
    end
    return lm.tensor(t, {dtype = dt})
  end
  solid(blocks(chw("f32", 1 / 255)), "10,200,30", "f32 CHW in 0..1")
  solid(blocks(chw("f16", 1)  , {range = {0, 255}}), "10,200,30", "f16 with range {0, 255}")
  solid(blocks(chw("u8", 1)), "10,200,30", "u8 pixel values")
  solid(blocks(chw("i32", 1)), "10,200,30", "i32 pixel values")
  solid(blocks(chw("f32", 1 / 255):permute{2, 3, 1}:contiguous()), "10,200,30", "f32 HWC (layout from the shape)")
  solid(blocks(lm.full({8, 8}, 0.5)), "128,128,128", "[H,W] gray")
  solid(blocks(lm.full({1, 8, 8}, 2)), "255,255,255", "floats above the range clamp")
  solid(blocks(lm.full({8, 8, 1}, 7, {dtype = "i32"}), {layout = "HWC"}), "7,7,7", "[H,W,1] with layout=")
  solid(blocks(lm.full({8, 8}, 1, {dtype = "bool"})), "255,255,255", "bool")
  -- a batch: a contact sheet (the images and the black padding)
  local set = colours(blocks(lm.stack{chw("f32", 1 / 255), chw("f32", 1 / 255)}))
  ok(set["10,200,30"] and set["0,0,0"], "a batch [N,C,H,W] is a contact sheet")
  -- a PNG file: the same cells as its tensor
  local p = tmp .. "/show.png"
  local img = lm.rand{3, 24, 24, seed = 3}
  lm.save(p, img)
  eq(lm.show(p, {protocol = "blocks", string = true}), blocks(img))
end)

test("lm.show: sizes in cells", function()
  local s = blocks(lm.rand{3, 16, 32, seed = 2})
  local _, rows = s:gsub("\n", "")
  eq(rows, 8)   -- 16 pixels, two a cell: not enlarged
  s = blocks(lm.rand{3, 16, 32, seed = 2}, {width = 8})
  _, rows = s:gsub("\n", "")
  eq(rows, 2)
  s = blocks(lm.rand{3, 16, 32, seed = 2}, {width = 64})
  _, rows = s:gsub("\n", "")
  eq(rows, 16)  -- asked for: enlarged
end)

test("lm.show: not a terminal prints nothing and says so", function()
  -- the runner's stdout is a pipe under tests/lua/run.sh
  if os.execute("test -t 1") then return end
  local shown, why = lm.show(lm.zeros{3, 4, 4})
  eq(shown, false)
  eq(why, "stdout is not a terminal")
  local name, how = lm.show_protocol()
  eq(name, "off")
  eq(how, "stdout is not a terminal")
  eq(lm.show(lm.zeros{3, 4, 4}, {protocol = "kitty"}), false)
end)

test("lm.show: refusals name what is wrong", function()
  raises(function() lm.show(lm.zeros{5, 8, 8, 5}, {string = true}) end, "PNG takes 1-4")
  raises(function() lm.show(lm.zeros{2, 3, 8, 8, 1}, {string = true}) end, "expected")
  raises(function() lm.show(lm.zeros{3, 8, 8}, {protocol = "ascii"}) end, 'protocol "ascii" is not one of')
  raises(function() lm.show(lm.zeros{3, 8, 8}, {width = -1}) end, "width -1")
  raises(function() lm.show(lm.zeros{3, 8, 8}, {colour = 1}) end, "unknown option 'colour'")
  raises(function() lm.show(lm.zeros{3, 8, 8}, {layout = "WHC", string = true}) end, 'layout must be "CHW" or "HWC"')
  raises(function() lm.show(42) end, "expected a tensor or a PNG file's path, got number")
  raises(function() lm.show(tmp .. "/none.png", {string = true}) end, "none.png")
  raises(function() lm.show(lm.zeros{3, 8, 8}, {range = {1, 1}, string = true}) end, "range {1, 1} is empty")
end)
