-- test_xyz.lua - issue 37's X/Y/Z plots from Lua (lua/l_xyz.c over
-- lua/xyz_grid.c, the code lumen generate --xyz draws with; lm.batch's xyz=
-- is tested end to end by tests/models/batch_grid.sh): an axis's values and
-- labels, the grid's layout (tiles copied exactly, black label pixels in
-- the bands, none in the corner; tiles of different sizes, as a hires_scale
-- axis makes), its file names, the errors.  Runs under
-- lua5.4 too: lumen.so links FreeType.
local T, lm = ...
local test, eq, ok, raises = T.test, T.eq, T.ok, T.raises

test("xyz_axis: values (a quoted one keeps its comma) and generate's labels", function()
  local a = lm.image.xyz_axis('cfg=5, 7.5')
  eq(a.name, "cfg"); eq(#a.values, 2); eq(a.values[2], "7.5"); eq(a.labels[1], "CFG Scale: 5")
  a = lm.image.xyz_axis('prompt_sr=fox,"a cat, sitting"')
  eq(a.values[2], "a cat, sitting"); eq(a.labels[2], "a cat, sitting")
  eq(lm.image.xyz_axis("lora:fox=0.5").labels[1], "lora:fox: 0.5")
  raises(function() lm.image.xyz_axis("seed") end, "expected NAME=V1,V2")
  raises(function() lm.image.xyz_axis("seed=1,,2") end, "an empty value")
end)

test("xyz_grid: tiles copied exactly under and beside label bands", function()
  local t1, t2 = lm.full({3, 50, 40}, 0.25), lm.full({3, 50, 40}, 0.75)
  local g = lm.image.xyz_grid({t1, t2, t2, t1}, {cols = 2, xlabels = {"Seed: 1", "Seed: 2"},
                                                 ylabels = {"CFG Scale: 5", "CFG Scale: 7"}})
  eq(g.ndim, 3); eq(g.shape[1], 3)
  local H, W = g.shape[2], g.shape[3]
  local top, left = H - 100, W - 80
  ok(top > 0 and left > 0, "label bands")
  -- the tiles' pixels, each where it belongs
  eq(g:slice(2, top + 1, top + 50):slice(3, left + 1, left + 40):max():item(), 0.25, "tile (1,1)")
  eq(g:slice(2, top + 1, top + 50):slice(3, left + 41, left + 80):min():item(), 0.75, "tile (2,1)")
  eq(g:slice(2, top + 51, top + 100):slice(3, left + 1, left + 40):min():item(), 0.75, "tile (1,2)")
  -- dark text in the column band and the row band, none in the corner
  ok(g:slice(2, 1, top):slice(3, left + 1, W):min():item() < 0.5, "column labels drawn")
  ok(g:slice(2, top + 1, H):slice(3, 1, left):min():item() < 0.5, "row labels drawn")
  eq(g:slice(2, 1, top):slice(3, 1, left):min():item(), 1, "the corner is white")
end)

test("xyz_grid: a title line; the grid files' names as lumen generate's", function()
  local t = lm.zeros{3, 30, 30}
  local a = lm.image.xyz_grid({t, t}, {cols = 2, xlabels = {"a", "b"}})
  local b = lm.image.xyz_grid({t, t}, {cols = 2, xlabels = {"a", "b"}, title = "Sampler: ddim"})
  ok(b.shape[2] > a.shape[2], "the title adds a line")
  eq(lm.image.xyz_grid_name("out/%05d.png", 0, 1), "out/grid.png")
  eq(lm.image.xyz_grid_name("out/fox.png", 1, 2), "out/fox_grid_1.png")
end)

test("xyz_grid: tiles of different sizes, each cell the largest's, a smaller tile at its top left on white", function()
  -- a hires_scale axis's cells: 40x30 beside 60x50 (W x H), then 60x30 below
  local a, b, c = lm.full({3, 30, 40}, 0.25), lm.full({3, 50, 60}, 0.5), lm.full({3, 30, 60}, 0)
  local g = lm.image.xyz_grid({a, b, c, a}, {cols = 2, xlabels = {"x 1", "x 2"}, ylabels = {"y 1", "y 2"}})
  local H, W = g.shape[2], g.shape[3]
  local top, left = H - 100, W - 120   -- every cell 60x50
  ok(top > 0 and left > 0, "label bands")
  local function cell(y0, y1, x0, x1) return g:slice(2, top + y0, top + y1):slice(3, left + x0, left + x1) end
  eq(cell(1, 30, 1, 40):min():item(), 0.25, "tile 1's pixels"); eq(cell(1, 30, 1, 40):max():item(), 0.25)
  eq(cell(31, 50, 1, 60):min():item(), 1, "white below tile 1"); eq(cell(1, 50, 41, 60):min():item(), 1, "and beside it")
  eq(cell(1, 50, 61, 120):min():item(), 0.5, "tile 2 fills its cell"); eq(cell(1, 50, 61, 120):max():item(), 0.5)
  eq(cell(51, 80, 1, 60):max():item(), 0, "tile 3 (as wide as its cell)"); eq(cell(81, 100, 1, 60):min():item(), 1)
  eq(cell(51, 80, 61, 100):max():item(), 0.25, "tile 4 at its cell's top left"); eq(cell(51, 100, 101, 120):min():item(), 1)
  -- the grid of the same tiles padded by hand to one size (the largest)
  local function padded(t)
    local h, w = t.shape[2], t.shape[3]
    local row = w < 60 and lm.concat({t, lm.ones{3, h, 60 - w}}, 3) or t
    return h < 50 and lm.concat({row, lm.ones{3, 50 - h, 60}}, 2) or row
  end
  local h = lm.image.xyz_grid({padded(a), b, padded(c), padded(a)},
                              {cols = 2, xlabels = {"x 1", "x 2"}, ylabels = {"y 1", "y 2"}})
  eq((g - h):abs():max():item(), 0, "the grid of tiles padded by hand")
end)

test("xyz_grid: errors name what is wrong", function()
  local t = lm.zeros{3, 4, 4}
  raises(function() lm.image.xyz_grid({t, t, t}, {cols = 2}) end, "3 tiles do not make rows of cols = 2")
  raises(function() lm.image.xyz_grid({t, lm.zeros{3, 0, 4}}, {cols = 2}) end, "tile 2: want [3, H, W], not [3, 0, 4]")
  raises(function() lm.image.xyz_grid({lm.zeros{4, 4}}, {}) end, "want [3, H, W], not [4, 4]")
  raises(function() lm.image.xyz_grid({t, t}, {cols = 2, xlabels = {"a"}}) end, "xlabels has 1 labels, want 2")
  raises(function() lm.image.xyz_grid({t}, {font = "/nonexistent/font.ttf"}) end, "font /nonexistent/font.ttf")
end)
