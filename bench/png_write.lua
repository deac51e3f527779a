-- png_write.lua [SIZE [RUNS]] - lm.image.write_png of a SIZE x SIZE RGB
-- image (1024), noisy and smooth, at the default level (banded deflate on
-- LUMEN_THREADS threads, core/io/io_deflate.c) and at level = 6 (libpng's
-- own encoder); median of RUNS (9) with the range, and the file sizes.
--   build/lumen bench/png_write.lua;  LUMEN_THREADS=1 build/lumen bench/png_write.lua
local a = {...}
local S, RUNS = tonumber(a[1]) or 1024, tonumber(a[2]) or 9
local noisy = lm.rand({3, S, S}, {seed = 1}):eval()
local smooth = lm.interpolate(lm.rand({1, 3, S // 16, S // 16}, {seed = 2}),
                              {size = {S, S}, mode = "bilinear"}):squeeze(1):eval()
local path = os.tmpname()
for _, case in ipairs{{"noisy", noisy}, {"smooth", smooth}} do
  for _, level in ipairs{-1, 6} do
    local opts = level >= 0 and {level = level} or nil
    local ts = {}
    lm.image.write_png(path, case[2], opts)
    for i = 1, RUNS do
      local t0 = lm.clock()
      lm.image.write_png(path, case[2], opts)
      ts[i] = (lm.clock() - t0) * 1000
    end
    table.sort(ts)
    local f = io.open(path, "rb")
    local size = f:seek("end")
    f:close()
    print(string.format("write_png %dx%d RGB %-6s %-13s %7.2f ms [%.2f-%.2f]  %8d bytes  threads %s",
      S, S, case[1], level >= 0 and ("level " .. level) or "default", ts[(RUNS + 1) // 2], ts[1],
      ts[RUNS], size, os.getenv("LUMEN_THREADS") or "all"))
  end
end
os.remove(path)
