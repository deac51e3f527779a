-- l_batch_xyz.lua - lm.batch's xyz=, grid=, font=, lora= and lora_dir=
-- (`lumen batch --xyz NAME=V1,V2 ... --lora FILE:W --lora-dir DIR`):
-- the job description before the run (embedded in lumen.so beside
-- l_batch.lua, which calls these through lm._batch.xyz).
--
-- An X/Y/Z plot expands the one base job (a params row or a seed) into one
-- job per cell, X fastest, then Y, then Z, as `lumen generate --xyz` orders
-- its images, so the cells spread over processes, resume and fail like any
-- other jobs (each cell is its own file).  Once every cell's file exists the
-- process that writes the manifest (rank 0) composes one labelled grid per
-- Z value from the cells' PNGs with the code `lumen generate` draws its grids
-- with (lua/xyz_grid.c, lm.image.xyz_grid) and writes it under a temporary
-- name and renames it, as every output of the run.
local lm, B = ...
local X = {}

local function copy(p)
  local c = {}
  for k, v in pairs(p) do c[k] = v end
  return c
end

-- ---- LoRAs: "FILE[:W]" entries, joined by ';' in a job's lora column ----

local function lora_entries(v, what, usage)
  local list = {}
  if v == nil then return list end
  if type(v) == "string" then
    for e in v:gmatch("[^;]+") do
      e = e:match("^%s*(.-)%s*$")
      if e ~= "" then list[#list + 1] = e end
    end
  elseif type(v) == "table" then
    for i, e in ipairs(v) do
      if type(e) ~= "string" or e == "" then usage(string.format("%s[%d] is not a FILE[:W] string", what, i)) end
      list[#list + 1] = e
    end
  else
    usage(string.format("%s is a %s: want \"FILE[:W]\", several joined by ';', or a list", what, type(v)))
  end
  return list
end

-- "dir/name.safetensors:0.8" -> "dir/name.safetensors", 0.8 (nil: no weight)
local function lora_split(e)
  local f, w = e:match("^(.*):([^:]*)$")
  if f and f ~= "" and tonumber(w) then return f, tonumber(w) end
  return e, nil
end

local function lora_stem(f) return (f:match("[^/]*$"):gsub("%.safetensors$", "")) end

-- The job source with the command line's LoRAs in each job: lora = the
-- --lora entries (those whose file the job's own lora column does not name)
-- then the job's own, joined by ';'; lora_dir = --lora-dir unless the job has
-- one.  A job's lora list becomes the joined string (the PNG's parameters
-- text and the manifest carry it: a job's params are enough to make it again).
function X.with_lora(o, source, usage)
  local cli = lora_entries(o.lora, "lora", usage)
  if o.lora_dir ~= nil and (type(o.lora_dir) ~= "string" or o.lora_dir == "") then
    usage("lora_dir must be a folder")
  end
  return function()
    local it = source()
    return function()
      local index, p = it()
      if not index then return nil end
      if #cli > 0 or type(p.lora) == "table" then
        local own = lora_entries(p.lora, "job " .. index .. "'s lora", usage)
        local named, all = {}, {}
        for _, e in ipairs(own) do named[(lora_split(e))] = true end
        for _, e in ipairs(cli) do if not named[(lora_split(e))] then all[#all + 1] = e end end
        for _, e in ipairs(own) do all[#all + 1] = e end
        p.lora = #all > 0 and table.concat(all, ";") or nil
      end
      if o.lora_dir and p.lora_dir == nil then p.lora_dir = o.lora_dir end
      return index, p
    end
  end
end

-- ---- axes ----

local INTEGER = {seed = true, steps = true, clip_skip = true, variation_seed = true, hires_steps = true,
                 subseed = true}
local NUMBER = {cfg = true, strength = true, variation_strength = true, hires_denoise = true,
                subseed_strength = true, hires = true}

local function plain_gsub(s, find, rep)
  local out, from = {}, 1
  while true do
    local a, b = s:find(find, from, true)
    if not a then break end
    out[#out + 1] = s:sub(from, a - 1) .. rep
    from = b + 1
  end
  out[#out + 1] = s:sub(from)
  return table.concat(out)
end

-- p with axis ax at value k (1-based); an error message names what is wrong
local function apply(p, ax, k)
  local name, v = ax.name, ax.values[k]
  local what = "xyz " .. name
  if name == "prompt_sr" then
    -- A1111's Prompt S/R: the first value, found in the prompt or the
    -- negative, is replaced by each value in turn
    local find = ax.values[1]
    local pr, ng = p.prompt and tostring(p.prompt), p.negative and tostring(p.negative)
    if not (pr and pr:find(find, 1, true)) and not (ng and ng:find(find, 1, true)) then
      error(string.format("%s: the first value, %s, is not in the job's prompt or negative (each value "
        .. "replaces it)", what, find), 0)
    end
    if pr then p.prompt = plain_gsub(pr, find, v) end
    if ng then p.negative = plain_gsub(ng, find, v) end
  elseif name:match("^lora:") then
    -- a LoRA's weight: its <lora:NAME:W> tag in the prompt, else the entry
    -- of the job's lora (--lora) whose file is NAME.safetensors
    local lname, w = name:sub(6), tonumber(v)
    if lname == "" then error(what .. ": name the LoRA (lora:NAME=0.2,0.8)", 0) end
    if not w then error(string.format("%s: '%s' is not a number", what, v), 0) end
    local pr = p.prompt and tostring(p.prompt) or ""
    local esc = lname:gsub("%p", "%%%0")
    local rep, n, n2 = "<lora:" .. lname:gsub("%%", "%%%%") .. ":" .. v .. ">", 0, 0
    pr, n = pr:gsub("<lora:" .. esc .. ":[^>]*>", rep)
    pr, n2 = pr:gsub("<lora:" .. esc .. ">", rep)
    if n + n2 > 0 then p.prompt = pr
    else
      local list, found = lora_entries(p.lora, "lora", function(m) error(m, 0) end), false
      for i, e in ipairs(list) do
        local f = lora_split(e)
        if lora_stem(f) == lname then list[i] = f .. ":" .. v; found = true end
      end
      if not found then
        error(string.format("%s: the job has no LoRA %s (a <lora:%s:W> tag in its prompt, or --lora "
          .. "DIR/%s.safetensors)", what, lname, lname, lname), 0)
      end
      p.lora = table.concat(list, ";")
    end
  elseif name == "hires_scale" then
    -- lumen generate's hires_scale axis: the scale of the job's hires fix
    -- (its hires column); cells of different sizes make one grid, each
    -- cell the largest's size (lm.image.xyz_grid)
    local n = tonumber(v)
    if not n then error(string.format("%s: '%s' is not a number", what, v), 0) end
    if p.hires == nil then
      error(what .. " is the hires fix's scale: give the job a hires column (as lumen generate's --hires X)", 0)
    end
    p.hires = n
  elseif INTEGER[name] then
    local n = math.tointeger(tonumber(v))
    if not n then error(string.format("%s: '%s' is not a whole number", what, v), 0) end
    p[name] = n
  elseif NUMBER[name] then
    local n = tonumber(v)
    if not n then error(string.format("%s: '%s' is not a number", what, v), 0) end
    p[name] = n
  else
    -- any other column of the job (sampler, size, ...): a number when it reads as one
    p[name] = tonumber(v) or v
  end
end

-- Expands the one job of (total, source) into the cells of the axes o.xyz
-- (a string or a list of up to 3).  Returns the new total and source and the
-- plot {axes=, dims=, base=}.
function X.expand(o, total, source, usage)
  local texts = o.xyz
  if type(texts) == "string" then texts = {texts} end
  if type(texts) ~= "table" or #texts == 0 then usage("xyz must be an axis \"NAME=V1,V2\" or a list of them") end
  if #texts > 3 then usage("xyz: at most 3 axes (X, Y, Z), not " .. #texts) end
  local axes, dims = {}, {1, 1, 1}
  for i, t in ipairs(texts) do
    local ok, ax = pcall(lm.image.xyz_axis, tostring(t))
    if not ok then usage((tostring(ax):gsub("^%-%-xyz ", "xyz "))) end
    axes[i], dims[i] = ax, #ax.values
  end
  if total ~= 1 then
    usage(string.format("xyz: the axes expand one job (the plot's base settings), and the job list has %d: "
      .. "give one params row or one seed", total))
  end
  local _, base = source()()
  -- every value tried on the base job now: usage errors before anything runs
  for _, ax in ipairs(axes) do
    for k = 1, #ax.values do
      local ok, err = pcall(apply, copy(base), ax, k)
      if not ok then usage(err) end
    end
  end
  local cells = dims[1] * dims[2] * dims[3]
  local function cell(c)   -- 1-based
    local at = {(c - 1) % dims[1], (c - 1) // dims[1] % dims[2], (c - 1) // (dims[1] * dims[2])}
    local p = copy(base)
    for k, ax in ipairs(axes) do apply(p, ax, at[k] + 1) end
    return p
  end
  return cells, function()
    local i = 0
    return function()
      i = i + 1
      if i > cells then return nil end
      return i, cell(i)
    end
  end, {axes = axes, dims = dims, cell = cell}
end

-- grid z's file (0-based of nz): o.grid's %d (else "_Z" before its
-- extension when nz > 1), or lumen generate's name from the output pattern
function X.grid_names(plot, o, pattern, usage)
  local nz, names = plot.dims[3], {}
  for z = 0, nz - 1 do
    local n
    if o.grid then
      if type(o.grid) ~= "string" or o.grid == "" then usage("grid must be a file name") end
      if o.grid:find("%%0?%d*d") then
        n = o.grid:gsub("%%(0?%d*)d", function(w) return string.format("%" .. w .. "d", z) end)
      elseif nz > 1 then n = o.grid:gsub("(%.[%w]+)$", "_" .. z .. "%1")
        if n == o.grid then n = o.grid .. "_" .. z end
      else n = o.grid end
    else
      n = lm.image.xyz_grid_name(pattern, z, nz)
      if n:find("{[%w_]+}") then
        usage("xyz: out '" .. pattern .. "' names each cell by a parameter: give the grid's file with grid= "
          .. "(--grid FILE)")
      end
    end
    names[z + 1] = n
  end
  -- the font: found (or refused) before anything runs
  local ok, err = pcall(lm.image.xyz_grid, {lm.zeros{3, 1, 1}}, {font = o.font})
  if not ok then usage((tostring(err):gsub("^lm%.image%.xyz_grid: ", ""))) end
  plot.names = names
  return names
end

-- The grids, once every cell's file is complete (a PNG that ends in IEND):
-- tiles are each cell's (first) file, the labels lumen generate draws, the
-- text chunks of the grid's first cell.  Returns the names written and the
-- messages of those that were not.
function X.write_grids(plot, o, files_of, write_file)
  local nx, ny, nz = plot.dims[1], plot.dims[2], plot.dims[3]
  local made, problems = {}, {}
  for z = 0, nz - 1 do
    local name, tiles, text, missing = plot.names[z + 1], {}, nil, 0
    for c = 1, nx * ny do
      local index = z * nx * ny + c
      local f = files_of(index, plot.cell(index))[1]
      local size, _, png_ok = B.file_check(f)
      if not size or not png_ok then missing = missing + 1
      else
        local img, t = lm.image.read_png(f, {dtype = "f32"})
        tiles[c] = lm.image.rgb(img)
        if c == 1 then text = t end
      end
    end
    if missing > 0 then
      problems[#problems + 1] = string.format("grid %s: %d of its %d cells have no image; not written (run "
        .. "the same command again to finish)", name, missing, nx * ny)
    else
      local ok, err = pcall(function()
        local g = lm.image.xyz_grid(tiles, {cols = nx, xlabels = plot.axes[1].labels,
          ylabels = plot.axes[2] and plot.axes[2].labels or nil,
          title = nz > 1 and plot.axes[3].labels[z + 1] or nil, font = o.font})
        local d = name:match("^(.*)/[^/]*$")
        if d and d ~= "" then B.mkdirs(d) end
        write_file(name, g, {text = text})
      end)
      if ok then made[#made + 1] = name
      else problems[#problems + 1] = "grid " .. name .. ": " .. tostring(err) end
    end
    tiles = nil
    collectgarbage("step")
  end
  return made, problems
end

B.xyz = X
