-- l_batch.lua - lm.batch: runs a render function over a list of jobs (seeds
-- or the rows of a params file) and writes one PNG per job, with a progress
-- bar, resume, failure records, a JSON Lines manifest and a contact sheet
-- (embedded in lumen.so; `lumen batch` is its command line, repl/batch.c).
--
-- Jobs are numbered 1..N in list order; every decision about a job depends
-- on its index and parameters only, so any order, batch size or number of
-- processes gives the same files.  Outputs are written under a temporary
-- name and renamed (lm.image.write_png does), so a file under its final name
-- is complete: resume skips those.  Memory stays flat: jobs are read from
-- their source as they run, and only the manifest's reorder buffer (jobs
-- finished out of order by other processes) and the contact sheet's first
-- entries are kept.
local lm = ...
local B = lm._batch
local enc, dec = B.json_encode, B.json_decode

local function fail(msg) error("batch: " .. msg, 0) end
-- a mistake in the options or the job list (exit status 2 from `lumen
-- batch`): repl/batch.c reads B.usage_error after the call fails
local function usage(msg)
  B.usage_error = true
  fail(msg)
end

-- the most jobs one run takes: the run checks every output name against
-- every other one before it starts (held in memory, about 100 bytes a job)
local MAX_JOBS = 10000000

-- ---- job sources: each yields (index, params) in index order ----

-- "1-1000", "7", "1,5,10-20" (or a number, or a list of numbers) -> ranges
local function parse_seeds(spec)
  local ranges, total = {}, 0
  local function add(a, b, text)
    if math.type(a) ~= "integer" or math.type(b) ~= "integer" then
      usage("seeds: " .. tostring(text) .. " is not a whole number from -2^63 to 2^63-1")
    end
    if b < a then usage("bad seed range " .. tostring(a) .. "-" .. tostring(b)) end
    -- the count in floating point: b - a + 1 wraps around for ranges
    -- near the integer limits (a negative count ran without end)
    if (b + 0.0) - a + 1 > MAX_JOBS or total + ((b + 0.0) - a + 1) > MAX_JOBS then
      usage(string.format("seeds: %s makes more than %d jobs, the most one run takes "
        .. "(split it into several runs)", tostring(spec), MAX_JOBS))
    end
    ranges[#ranges + 1] = {a, b}
    total = total + (b - a + 1)
  end
  if type(spec) == "number" then add(math.tointeger(spec), math.tointeger(spec), spec)
  elseif type(spec) == "table" then
    for _, s in ipairs(spec) do add(math.tointeger(s), math.tointeger(s), s) end
  elseif type(spec) == "string" then
    for part in spec:gmatch("[^,]+") do
      local a, b = part:match("^%s*(%-?%d+)%s*%-%s*(%-?%d+)%s*$")
      if not a then a = part:match("^%s*(%-?%d+)%s*$"); b = a end
      if not a then usage("seeds: cannot read '" .. part .. "' (use 1-1000 or 1,5,9-12)") end
      add(math.tointeger(tonumber(a)), math.tointeger(tonumber(b)), part)
    end
  else usage("seeds must be a string like '1-100', a number or a list") end
  if total == 0 then usage("seeds: no seeds") end
  return ranges, total
end

local function seed_source(spec)
  local ranges, total = parse_seeds(spec)
  return total, function()
    local r, s, i = 1, nil, 0
    return function()
      -- compared before the step: s + 1 past math.maxinteger wraps around
      if s == nil then s = ranges[r][1]
      elseif s == ranges[r][2] then
        r = r + 1
        if not ranges[r] then return nil end
        s = ranges[r][1]
      else s = s + 1 end
      i = i + 1
      return i, {seed = s}
    end
  end
end

-- CSV (RFC 4180: quoted fields, "" inside quotes, line breaks inside
-- quotes; a header row names the columns).  Fields that read as numbers
-- become numbers.  Returns the fields, or nil when the text is malformed,
-- or false when a quoted field is still open at the end (the record goes on
-- on the next line).
local function csv_fields(line)
  local out, pos, n = {}, 1, #line
  while true do
    local v
    if line:sub(pos, pos) == '"' then
      local buf, i = {}, pos + 1
      while true do
        local q = line:find('"', i, true)
        if not q then return false end
        buf[#buf + 1] = line:sub(i, q - 1)
        if line:sub(q + 1, q + 1) == '"' then buf[#buf + 1] = '"'; i = q + 2
        else pos = q + 1; break end
      end
      v = table.concat(buf)
    else
      local c = line:find(",", pos, true) or n + 1
      v = line:sub(pos, c - 1)
      pos = c
    end
    out[#out + 1] = v
    local ch = line:sub(pos, pos)
    if ch == "," then pos = pos + 1
    elseif ch == "" then return out
    else return nil end
  end
end

-- the records of a params file: yields (first line number, record), where
-- a record is a CSV line's fields (or nil when malformed) or a JSON Lines
-- line; blank lines are skipped, a UTF-8 byte order mark (as spreadsheets
-- write) is dropped, CRLF endings are accepted
local function file_records(path, kind)
  local lines, lineno = io.lines(path), 0
  local function next_line()
    local l = lines()
    if l == nil then return nil end
    lineno = lineno + 1
    if lineno == 1 then l = l:gsub("^\239\187\191", "") end
    return (l:gsub("\r$", ""))
  end
  return function()
    while true do
      local line = next_line()
      if line == nil then return nil end
      if line:match("%S") then
        local first = lineno
        if kind ~= "csv" then return first, line end
        local v = csv_fields(line)
        while v == false do
          local more = next_line()
          if more == nil then
            fail(string.format("params: %s:%d: a quoted field is not closed", path, first))
          end
          line = line .. "\n" .. more
          v = csv_fields(line)
        end
        return first, v or nil, true
      end
    end
  end
end

-- a folder: one job per PNG in it, in name order, with path, file and stem
local function folder_source(dir, names)
  return #names, function()
    local i = 0
    return function()
      i = i + 1
      local f = names[i]
      if not f then return nil end
      return i, {path = dir .. "/" .. f, file = f, stem = f:gsub("%.[^.]*$", ""), seed = i}
    end
  end
end

local function params_source(path)
  local names = B.listdir(path, ".png")
  if names then
    if #names == 0 then fail("params: no .png files in " .. path) end
    return folder_source(path:gsub("/+$", ""), names)
  end
  local kind = path:match("%.[cC][sS][vV]$") and "csv" or "jsonl"
  local reg, rerr = B.regular(path)
  if not reg then fail("params: " .. rerr) end
  local f, err = io.open(path, "r")
  if not f then fail("params: " .. tostring(err)) end
  f:close()
  -- first pass: count jobs (and check the header)
  local total, header = 0, nil
  for lineno, v in file_records(path, kind) do
    if kind == "csv" and not header then
      header = v or fail(string.format("params: %s:%d: bad CSV header", path, lineno))
      -- a column named twice would keep only its last value in every job
      local seen = {}
      for k, name in ipairs(header) do
        if seen[name] then
          fail(string.format("params: %s:%d: column '%s' is named twice in the header "
            .. "(columns %d and %d); each job would keep only the last", path, lineno, name,
            seen[name], k))
        end
        seen[name] = k
      end
    else
      total = total + 1
      if total > MAX_JOBS then
        usage(string.format("params: %s has more than %d jobs, the most one run takes", path, MAX_JOBS))
      end
    end
  end
  if total == 0 then fail("params: no jobs in " .. path) end
  return total, function()
    local recs, i, hdr = file_records(path, kind), 0, nil
    return function()
      for lineno, v in recs do
        if kind == "csv" and not hdr then hdr = v
        else
          i = i + 1
          local p
          if kind == "csv" then
            if not v then fail(string.format("params: %s:%d: bad CSV line", path, lineno)) end
            if #v ~= #hdr then
              fail(string.format("params: %s:%d: %d fields, the header has %d", path, lineno, #v, #hdr))
            end
            p = {}
            for k, name in ipairs(hdr) do p[name] = tonumber(v[k]) or v[k] end
          else
            local m
            p, m = dec(v)
            -- an array decodes to a table too: only an object is a job's params
            if type(p) ~= "table" or not v:match("^%s*{") then
              fail(string.format("params: %s:%d: %s", path, lineno, m or "not a JSON object"))
            end
            -- a manifest record is a params line too (its params field)
            if type(p.params) == "table" and p.index then p = p.params end
          end
          if p.seed == nil then p.seed = i end
          return i, p
        end
      end
      return nil
    end
  end
end

local function list_source(jobs)
  return #jobs, function()
    local i = 0
    return function()
      i = i + 1
      local p = jobs[i]
      if p == nil then return nil end
      local c = {}
      for k, v in pairs(p) do c[k] = v end
      if c.seed == nil then c.seed = i end
      return i, c
    end
  end
end

-- ---- output names ----

-- %d / %05d: the job index (1-based); {key}: a parameter ({seed}, {index},
-- {name}: the output's name when the script declares names, else the
-- parameter called name)
local function out_path(pattern, index, p, name)
  local s = pattern:gsub("%%(0?%d*)d", function(w) return string.format("%" .. w .. "d", index) end)
  s = s:gsub("{([%w_]+)}", function(k)
    if k == "index" then return tostring(index) end
    if k == "name" and name then return name end
    local v = p[k]
    if v == nil then usage("out: no parameter '" .. k .. "' for {" .. k .. "}") end
    if math.type(v) == "float" and v == math.floor(v) then v = math.tointeger(v) end
    return (tostring(v):gsub("[/%z]", "_"))
  end)
  if name and not pattern:find("{name}", 1, true) then
    s = s:gsub("(%.[%w]+)$", "_" .. name .. "%1")
  end
  return s
end

local function dirname(path) return path:match("^(.*)/[^/]*$") end

-- the output set: the folder of the outputs, up to the first part of the
-- pattern that changes from job to job ("out/{seed}/x.png" -> "out")
local function set_dir(pattern)
  local d = dirname(pattern)
  if not d then return "." end
  if d == "" then return "/" end
  local fixed = d:match("^[^%%{]*")
  if fixed ~= d then fixed = fixed:match("^(.*)/[^/]*$") or "." end
  return fixed == "" and "/" or fixed
end

-- Writes a PNG under a temporary name only this process uses (created
-- exclusively) and renames it into place; returns the file's size and
-- crc32.  A signal's handler removes the temporary (B.tmp_create registers
-- it), so a stopped run leaves none; after a signal nothing is renamed.
local function write_file(final, t, po)
  local tmp, err = B.tmp_create(final)
  if not tmp then error(err, 0) end
  local ok, werr = pcall(lm.image.write_png, tmp, t, po)
  -- a signal abandons the image being written, whether or not the write
  -- still needed the device (a host copy's does not: the pipeline's)
  if ok and B.sigint() > 0 then ok, werr = false, "interrupted" end
  local size, crc
  if ok then
    size, crc = B.file_check(tmp)
    ok, werr = os.rename(tmp, final)
    -- os.rename's message is strerror alone ("Is a directory")
    if not ok then werr = "cannot write " .. final .. ": " .. tostring(werr) end
  end
  if not ok then os.remove(tmp) end
  B.tmp_forget(tmp)
  if not ok then
    -- the message names the file the user asked for
    error((tostring(werr):gsub(tmp:gsub("%p", "%%%0"), (final:gsub("%%", "%%%%")))), 0)
  end
  return size, crc
end

-- ---- text carried by each PNG ----

local function a1111_value(v)
  local s = tostring(v)
  if s:find('[,:"\n]') then return enc(s) end
  return s
end

-- A1111's "parameters": an optional prompt line, then "Key: value, ...".
local function parameters_text(p, index, size, script)
  local keys = {}
  for k in pairs(p) do
    if k ~= "seed" and k ~= "prompt" and k ~= "negative_prompt" and type(k) == "string" then keys[#keys + 1] = k end
  end
  table.sort(keys)
  local parts = {}
  if p.prompt then parts[#parts + 1] = tostring(p.prompt) .. "\n" end
  if p.negative_prompt then parts[#parts + 1] = "Negative prompt: " .. tostring(p.negative_prompt) .. "\n" end
  local kv = {"Seed: " .. a1111_value(p.seed), "Size: " .. size, "Index: " .. index}
  for _, k in ipairs(keys) do
    local v = p[k]
    if type(v) ~= "table" then kv[#kv + 1] = k .. ": " .. a1111_value(v) end
  end
  if script then kv[#kv + 1] = "Script: " .. a1111_value(script) end
  kv[#kv + 1] = "Lumen: " .. lm.version
  return table.concat(parts) .. table.concat(kv, ", ")
end

local function image_size(t, layout)
  local s = t.shape
  if #s == 2 then return s[2] .. "x" .. s[1] end
  if layout == "HWC" then return s[2] .. "x" .. s[1] end
  return s[#s] .. "x" .. s[#s - 1]
end

-- ---- progress ----

local function fmt_time(s)
  if s ~= s or s == math.huge then return "--:--" end
  s = math.floor(s + 0.5)
  if s >= 3600 then return string.format("%d:%02d:%02d", s // 3600, s % 3600 // 60, s % 60) end
  return string.format("%d:%02d", s // 60, s % 60)
end

local function new_progress(total, mode)
  local tty = mode == "bar"
  local t0 = B.now()
  local last = -1
  local P = {done = 0, made = 0, existed = 0, failed = 0, pending = 0, by_rank = {}}
  function P.line(final)
    local el = B.now() - t0
    local rate = P.made > 0 and P.made / el or 0
    local left = total - P.done
    local eta = rate > 0 and left / rate or math.huge
    local s = string.format("%d/%d  %s img/s  %s %s  failed %d", P.done, total,
      string.format(rate < 10 and "%.2f" or "%.1f", rate),
      final and "elapsed" or "ETA", fmt_time(final and el or eta), P.failed)
    if P.existed > 0 then s = s .. string.format("  (%d existed)", P.existed) end
    return s
  end
  function P.draw(force)
    if mode == "off" then return end
    local now = B.now()
    if not force and now - last < (tty and 0.1 or 10) then return end
    last = now
    if tty then
      -- one line, never wrapped (\r could not go back over a wrapped one):
      -- the bar shrinks or goes on a narrow terminal
      local text, cols = P.line(false), B.term_width(2) or 80
      local w = math.min(24, cols - #text - 4)
      local s = text
      if w >= 5 then
        local k = total > 0 and math.floor(w * P.done / total) or w
        s = "[" .. string.rep("#", k) .. string.rep(".", w - k) .. "] " .. text
      end
      io.stderr:write("\r\27[K", s:sub(1, cols - 1))
    else
      io.stderr:write("batch: ", P.line(false), "\n")
    end
    io.stderr:flush()
  end
  function P.finish()
    if mode == "off" then return end
    if tty then io.stderr:write("\r\27[K") end
    io.stderr:write("batch: ", P.line(true), "\n")
    io.stderr:flush()
  end
  return P
end

-- ---- contact sheet ----

-- 3x5 digits (and '-') for the seed labels, one string of 15 bits per glyph
local GLYPHS = {
  ["0"] = "111101101101111", ["1"] = "010110010010111", ["2"] = "111001111100111",
  ["3"] = "111001111001111", ["4"] = "101101111001001", ["5"] = "111100111001111",
  ["6"] = "111100111101111", ["7"] = "111001010010010", ["8"] = "111101111101111",
  ["9"] = "111101111001111", ["-"] = "000000111000000",
}

-- a [3, 14, w] strip: white digits (2x scale) on black
local function label_strip(text, w)
  local h, sc = 14, 2
  local px = {}
  for i = 1, h * w do px[i] = 0 end
  local x0 = math.max(0, (w - #text * 8 + 2) // 2)
  for c = 1, #text do
    local g = GLYPHS[text:sub(c, c)]
    if g then
      for gy = 0, 4 do
        for gx = 0, 2 do
          if g:sub(gy * 3 + gx + 1, gy * 3 + gx + 1) == "1" then
            for dy = 0, sc - 1 do
              for dx = 0, sc - 1 do
                local x, y = x0 + (c - 1) * 8 + gx * sc + dx, 2 + gy * sc + dy
                if x < w then px[y * w + x + 1] = 1 end
              end
            end
          end
        end
      end
    end
  end
  return lm.tensor(px):reshape{1, h, w}:broadcast_to{3, h, w}
end

local function write_sheet(path, entries, thumb)
  if #entries == 0 then return end
  local first = lm.image.read_png(entries[1].file, {dtype = "f32"})
  local H, W = first.shape[2], first.shape[3]
  local s = thumb / math.max(H, W)
  local th, tw = math.max(1, math.floor(H * s + 0.5)), math.max(1, math.floor(W * s + 0.5))
  local tiles = {}
  for i, e in ipairs(entries) do
    local ok, img = pcall(lm.image.read_png, e.file, {dtype = "f32"})
    if ok then
      img = lm.image.rgb(img)
      local t = lm.adaptive_avg_pool2d(img:reshape{1, 3, img.shape[2], img.shape[3]}, {th, tw})
      tiles[#tiles + 1] = lm.concat({t:reshape{3, th, tw}, label_strip(tostring(e.label), tw)}, 2):eval()
    end
    if i % 16 == 0 then collectgarbage("step") end
  end
  if #tiles == 0 then return end
  local nrow = math.ceil(math.sqrt(#tiles))
  local g = lm.image.grid(tiles, {nrow = nrow, pad = 2})
  local d = dirname(path)
  if d then B.mkdirs(d) end
  write_file(path, g, {level = 9})   -- written once: worth the smaller file
end

-- ---- the run ----

local KNOWN = {
  script = true, render = true, render_batch = true, seeds = true, params = true, jobs = true,
  out = true, only = true, batch_size = true, nan_check = true, sheet = true, sheet_max = true,
  sheet_size = true, manifest = true, progress = true, args = true, names = true, png = true,
  serial = true, _dist = true,
  xyz = true, grid = true, font = true, lora = true, lora_dir = true,   -- lua/l_batch_xyz.lua
}
-- issue 39: where each process's time goes (repl/batch.c gives _t0, the
-- time `lumen batch` started, on B.now()'s clock)
KNOWN.timeline, KNOWN._t0 = true, true

-- the script: a file returning a function, or a table {render=, render_batch=,
-- names=, png=}; or functions given directly
local function load_spec(o)
  local spec = {}
  if o.script then
    local chunk, err = loadfile(o.script)
    if not chunk then fail(err) end
    local r = chunk(table.unpack(o.args or {}))
    if type(r) == "function" then spec.render = r
    elseif type(r) == "table" then for k, v in pairs(r) do spec[k] = v end
    elseif r == nil then spec.render, spec.render_batch = rawget(_G, "render"), rawget(_G, "render_batch")
    else fail(o.script .. " returned a " .. type(r) .. " (want a function or a table)") end
  end
  for _, k in ipairs{"render", "render_batch", "names", "png"} do
    if o[k] ~= nil then spec[k] = o[k] end
  end
  if not spec.render and not spec.render_batch then
    fail((o.script or "lm.batch") .. ": no render function (return a function, or {render=, render_batch=})")
  end
  return spec
end

-- an image as lm.image.write_png takes it: [H, W], or [C, H, W] ([H, W, C]
-- with layout HWC) with 1 to 4 channels; batch: one more leading axis
local function check_image(name, t, layout, batch)
  local what = name and (" for '" .. name .. "'") or ""
  if not lm.is_tensor(t) then
    error(string.format("the render function returned a %s%s, not a tensor", type(t), what), 0)
  end
  local lead = batch and 1 or 0
  local nd, ok = t.ndim, t.ndim == 2 + lead
  if nd == 3 + lead then
    local c = layout == "HWC" and t.shape[nd] or t.shape[1 + lead]
    ok = c >= 1 and c <= 4
  end
  if not ok then
    error(string.format("the render %s returned a tensor of shape [%s]%s, not an image: want %s[H, W] or "
      .. "%s[C, H, W] with 1 to 4 channels", batch and "_batch function" or "function",
      table.concat(t.shape, ", "), what, batch and "N, " or "", batch and "N, " or ""), 0)
  end
end

-- list of {name, tensor} from what a render function returned
local function outputs_of(spec, r, layout, batch)
  if lm.is_tensor(r) or not spec.names then
    if type(r) == "table" and not lm.is_tensor(r) then
      error("the render function returned a table: declare names = {...} "
        .. "in the script's table to write several images per job", 0)
    end
    check_image(nil, r, layout, batch)
    return {{nil, r}}
  end
  local out = {}
  for _, n in ipairs(spec.names) do
    check_image(n, r[n], layout, batch)
    out[#out + 1] = {n, r[n]}
  end
  return out
end

-- the render function gets a copy: what it changes never reaches the
-- manifest or the PNG text
local function copy(p)
  local c = {}
  for k, v in pairs(p) do c[k] = v end
  return c
end

local function has_nan(t)
  local ok, bad = pcall(function() return (t:isnan():any():item()) or (t:isinf():any():item()) end)
  return ok and bad
end

function lm.batch(o)
  if type(o) ~= "table" then fail("takes a table of options") end
  B.usage_error = nil
  for k in pairs(o) do if not KNOWN[k] then usage("unknown option '" .. tostring(k) .. "'") end end
  local TL = B.timeline_new(o)
  if o.timeline ~= nil and (type(o.timeline) ~= "string" or o.timeline == "") then
    usage("timeline must be a file name")
  end
  if o._dist and not os.getenv("LUMEN_DEVICE") then
    -- one GPU per process on a node, by node-local rank; else the CPU.  Chosen
    -- before the script runs, so what it loads at the top (a diffusion
    -- pipeline's weights) goes to this rank's GPU, not to the first one
    local gpus = {}
    for _, d in ipairs(lm.devices()) do
      if d.kind:match("gpu$") and d.kind ~= "cpu-gpu" then gpus[#gpus + 1] = d.spec end
    end
    if #gpus > 0 then lm.device(gpus[o._dist.local_rank % #gpus + 1]) end
  end
  local spec = load_spec(o)
  TL.mark("load")
  local nsrc = (o.seeds and 1 or 0) + (o.params and 1 or 0) + (o.jobs and 1 or 0)
  if nsrc > 1 then usage("give one of seeds, params and jobs") end
  local total, source
  if o.params then total, source = params_source(o.params)
  elseif o.jobs then total, source = list_source(o.jobs)
  else total, source = seed_source(o.seeds or "1-16") end
  -- issue 37: --lora / --lora-dir in each job's params; an X/Y/Z plot's
  -- cells as the jobs (lua/l_batch_xyz.lua)
  source = B.xyz.with_lora(o, source, usage)
  local plot
  if o.xyz ~= nil then total, source, plot = B.xyz.expand(o, total, source, usage)
  elseif o.grid ~= nil or o.font ~= nil then usage("grid and font are an X/Y/Z plot's: give xyz") end
  local pattern = o.out or "out/%05d.png"
  if type(pattern) ~= "string" or pattern == "" then usage("out must be a file name pattern") end
  if pattern:find("%%0?%d%d%d+d") then
    usage("out '" .. pattern .. "': the width of %d is at most 99 (%05d makes 00001)")
  end
  if total > 1 and not pattern:find("%%0?%d*d") and not pattern:find("{[%w_]+}") then
    usage("out '" .. pattern .. "' names one file for " .. total .. " jobs: put %05d or {seed} in it")
  end
  local only = o.only and math.tointeger(o.only)
  if o.only and (not only or only < 1 or only > total) then
    usage("only " .. tostring(o.only) .. " is not a job index (1.." .. total .. ")")
  end
  local bs = math.tointeger(o.batch_size or 1)
  if not bs or bs < 1 then usage("batch_size must be a positive integer") end
  if bs > 1 and not spec.render_batch then bs = 1 end
  local dist = TL.dist(o._dist)   -- its waits counted as idle
  local root = not dist or dist.rank == 0
  local script_name = o.script and o.script:match("[^/]*$") or nil
  local png = spec.png or {}
  local layout = png.layout

  local mode = o.progress
  if mode == nil or mode == "auto" then mode = B.isatty(2) and "bar" or "lines" end
  if mode == true then mode = "bar" elseif mode == false then mode = "off" end
  if mode ~= "bar" and mode ~= "lines" and mode ~= "off" then
    usage("progress must be 'bar', 'lines', 'off' or 'auto', not '" .. tostring(mode) .. "'")
  end

  -- manifest: explicit, or beside the outputs (not for --only)
  local manifest = o.manifest
  if manifest == nil and not only then manifest = (dirname(pattern) or ".") .. "/manifest.jsonl" end
  if manifest == false or manifest == "" or manifest == "none" then manifest = nil end
  local function files_of(index, p)
    if spec.names then
      local f = {}
      for k, n in ipairs(spec.names) do f[k] = out_path(pattern, index, p, n) end
      return f
    end
    return {out_path(pattern, index, p, nil)}
  end

  -- the grids' files: none is a cell's
  if plot then
    local g = {}
    for _, n in ipairs(B.xyz.grid_names(plot, o, pattern, usage)) do g[n] = true end
    for c = 1, total do
      for _, f in ipairs(files_of(c, plot.cell(c))) do
        if g[f] then usage(string.format("job %d and the grid would both write %s: give the grid "
          .. "another name (grid=, --grid FILE)", c, f)) end
      end
    end
  end

  -- distinct jobs write distinct files: checked before anything is made
  -- (a pattern that holds the job number and no parameter is distinct by
  -- construction)
  if spec.names or not pattern:find("%%0?%d*d") or pattern:find("{[%w_]+}") then
    local seen, it = {}, source()
    while true do
      local index, p = it()
      if not index then break end
      for _, f in ipairs(files_of(index, p)) do
        local prev = seen[f]
        if prev == index then
          usage(string.format("job %d writes %s twice: its outputs need distinct names "
            .. "(put {name} or an extension in out)", index, f))
        elseif prev then
          usage(string.format("jobs %d and %d would both write %s: give each job its own file "
            .. "(put %%05d, the job number, or a parameter that differs between jobs in out)", prev, index, f))
        end
        seen[f] = index
      end
    end
    seen = nil
  end

  -- the output set belongs to one run: rank 0 locks it before any process
  -- of the run writes, then removes what dead runs left
  local sdir = set_dir(pattern)
  local lock
  if root then
    local okd, derr = B.mkdirs(sdir)
    if not okd then
      if dist then dist.start(false) end
      fail(derr)
    end
    local holder, lerr
    lock, holder, lerr = B.lock(sdir .. "/.lumen-batch.lock")
    if not lock then
      if dist then dist.start(false) end
      if lerr then fail(holder) end
      fail(string.format("the output folder %s is in use by another run (%s): wait for it to end, "
        .. "or write somewhere else", sdir, holder))
    end
    B.tmp_sweep(sdir, true)
  end
  local lock_guard <close> = lock   -- released when lm.batch returns or fails
  local mf, mtmp
  local mtmp_guard <close> = setmetatable({}, {__close = function()
    if mtmp then os.remove(mtmp); B.tmp_forget(mtmp) end
  end})
  if root and manifest then
    local d = dirname(manifest)
    if d then B.mkdirs(d); if d ~= sdir then B.tmp_sweep(d, false) end end
    local err
    mtmp, err = B.tmp_create(manifest)
    mf = mtmp and io.open(mtmp, "w")
    -- any error that leaves lm.batch before the rename below takes the
    -- temporary with it: a signal before the run's own handlers are in
    -- place raises the REPL's "interrupted" wherever Lua happens to be
    if not mf then
      if mtmp then os.remove(mtmp); B.tmp_forget(mtmp) end
      if dist then dist.start(false) end
      fail("cannot write the manifest " .. manifest .. ": " .. tostring(err))
    end
  end
  if dist then dist.start(true) end

  -- resume: the previous run's manifest, read along in index order, holds
  -- each file's size and crc32
  local old_rec
  do
    local f, cur = manifest and io.open(manifest, "r"), nil
    old_rec = function(index)
      while f and (not cur or cur.index < index) do
        local line = f:read("l")
        if not line then f:close(); f, cur = nil, nil; break end
        local r = dec(line)
        if type(r) == "table" and math.type(r.index) == "integer" then cur = r end
      end
      if cur and cur.index == index then return cur end
      return nil
    end
  end

  if not root then mode = "off" end
  local P = new_progress(only and 1 or total, mode)
  local sheet_entries, sheet_max = {}, o.sheet_max or 64
  local failures = {}

  -- records reach the manifest in index order: those that finish early
  -- (other processes) wait in `held` until the ones before them are in
  local next_rec, held = only or 1, {}
  local function take(index, rec)
    held[index] = rec
    while held[next_rec] do
      local r = held[next_rec]
      held[next_rec] = nil
      local wok, werr = true, nil
      if mf then wok, werr = mf:write(r.line, "\n") end
      if not wok then
        fail("cannot write the manifest " .. manifest .. ": " .. tostring(werr):gsub("^[^:]*: ", ""))
      end
      if r.status ~= "pending" then P.done = P.done + 1 end
      if r.status == "ok" then
        P.made = P.made + 1
        P.by_rank[(r.rank or 0) + 1] = (P.by_rank[(r.rank or 0) + 1] or 0) + 1
      elseif r.status == "exists" then P.existed = P.existed + 1
      elseif r.status == "failed" then
        P.failed = P.failed + 1
        if #failures < 20 then
          -- messages from the runner itself do not repeat the job number
          local e = tostring(r.err):gsub("^job " .. next_rec .. ": ", "")
          failures[#failures + 1] = string.format("job %d: %s", next_rec, e)
        end
      elseif r.status == "pending" then P.pending = P.pending + 1 end
      if (r.status == "ok" or r.status == "exists") and o.sheet and #sheet_entries < sheet_max then
        sheet_entries[#sheet_entries + 1] = {file = r.file, label = r.seed}
      end
      next_rec = only and math.huge or next_rec + 1
    end
    P.draw(false)
  end
  local function record(index, p, files, status, err, sizes, crcs)
    local r = {index = index, status = status, params = p, error = err}
    if #files == 1 then r.file = files[1] else r.files = files end
    if sizes then
      if #files == 1 then r.size, r.crc32 = sizes[1], crcs[1] else r.sizes, r.crc32s = sizes, crcs end
    end
    local rec = {line = enc(r), status = status, err = err, file = files[1], seed = p.seed}
    if dist and not root then dist.send(index, rec.line)
    else take(index, rec) end
  end
  record = TL.wrap_record(record)
  local function absorb()   -- root: records other processes sent
    if dist and root then
      for _, m in ipairs(dist.poll()) do
        local r = dec(m.line)
        take(m.index, {line = m.line, status = r.status, rank = m.rank, err = r.error, file = r.file or (r.files or {})[1],
                        seed = (r.params or {}).seed})
      end
    end
  end

  -- a file is complete when the previous manifest's record of it has its
  -- size and crc32, or (no record) when it is a PNG that ends in IEND;
  -- anything else is made again
  local function complete(index, files)
    local rec = old_rec(index)
    local sizes, crcs = {}, {}
    for k, f in ipairs(files) do
      local size, crc, png_ok = B.file_check(f)
      if not size then return false end
      local rsize, rcrc
      if rec and rec.file == f then rsize, rcrc = rec.size, rec.crc32
      elseif rec and type(rec.files) == "table" and rec.files[k] == f then
        rsize, rcrc = (rec.sizes or {})[k], (rec.crc32s or {})[k]
      end
      if rcrc then
        if rsize ~= size or rcrc ~= crc then return false end
      elseif not png_ok then return false end
      sizes[k], crcs[k] = size, crc
    end
    return true, sizes, crcs
  end
  local made_dirs = {n = 0}
  -- nans: whether each output holds a NaN or Inf, when the pipeline
  -- checked on the device already (outs are then host copies)
  local function write_job(index, p, files, outs, nans)
    for k, pair in ipairs(outs) do
      local t = pair[2]
      local bad
      if nans then bad = nans[k] elseif o.nan_check then bad = has_nan(t) end
      if bad then
        error(string.format("NaN or Inf in %s", pair[1] or "the image"), 0)
      end
      local d = dirname(files[k])
      if d and not made_dirs[d] then
        local ok, err = B.mkdirs(d)
        if not ok then error(err, 0) end
        B.tmp_sweep(d, false)   -- what dead runs of this host left there
        -- bounded: a {seed} in the directory makes one per job
        if made_dirs.n > 256 then made_dirs = {n = 0} end
        made_dirs[d], made_dirs.n = true, made_dirs.n + 1
      end
    end
    local sizes, crcs = {}, {}
    for k, pair in ipairs(outs) do
      local t = pair[2]
      local text = {parameters = parameters_text(p, index, image_size(t, layout), script_name),
                    lumen = enc{index = index, params = p, script = script_name, name = pair[1]}}
      local po = {text = text}
      for kk, v in pairs(png) do po[kk] = v end
      po.text = text
      sizes[k], crcs[k] = write_file(files[k], t, po)
    end
    return sizes, crcs
  end

  local interrupted = false
  local function stopped() return B.sigint() > 0 end

  -- renders a group and evaluates its outputs, waiting for them (serial)
  -- or only queuing them (lm.async_eval: the device computes while the
  -- host writes the group before); -> ok, {outs = {{name, tensor}...},
  -- batch = whether the tensors stack the group's images} | false, message
  local function render(group, wait)
    local evaluate = wait and lm.eval or lm.async_eval
    return B.run_job(function()
      if #group == 1 and spec.render then
        local outs = outputs_of(spec, spec.render(copy(group[1].p)), layout, false)
        local ts = {}
        for _, pr in ipairs(outs) do ts[#ts + 1] = pr[2] end
        evaluate(table.unpack(ts))
        return {outs = outs, batch = false}
      end
      local ps = {}
      for k, j in ipairs(group) do ps[k] = copy(j.p) end
      local outs = outputs_of(spec, spec.render_batch(ps), layout, true)
      local ts = {}
      for _, pr in ipairs(outs) do
        if pr[2].ndim < 1 or pr[2].shape[1] ~= #group then
          error(string.format("render_batch returned %s for %d jobs: want a leading axis of %d",
            pr[2]:brief(), #group, #group), 0)
        end
        ts[#ts + 1] = pr[2]
      end
      evaluate(table.unpack(ts))
      return {outs = outs, batch = true}
    end)
  end
  render = TL.wrap_render(render)
  -- the {name, tensor} pairs of the group's k-th job
  local function job_outs(r, k)
    if not r.batch then return r.outs end
    local o1 = {}
    for m, pr in ipairs(r.outs) do o1[m] = {pr[1], pr[2]:select(1, k)} end
    return o1
  end

  -- writes and records each job of a rendered group: false when interrupted
  -- (the job being written when the signal came, and those after it, are
  -- left for the caller to record as pending)
  local function write_group(group, ok, res)
    for k, j in ipairs(group) do
      local wok, werr, crcs = ok, res, nil
      if ok then
        wok, werr, crcs = pcall(write_job, j.index, j.p, j.files, job_outs(res, k), res.nans and res.nans[k])
      end
      if stopped() then return false end
      if wok then record(j.index, j.p, j.files, "ok", nil, werr, crcs)
      else record(j.index, j.p, j.files, "failed", tostring(werr)) end
      j.recorded = true
    end
    return true
  end

  write_group = TL.wrap("write", write_group)

  -- a failing batch: each job alone, so only the bad ones fail
  local function retry_alone(e) return not e.ok and #e.group > 1 and spec.render end
  -- run({job}) for each job of group; false when one was interrupted
  local function each_alone(run, group)
    for _, j in ipairs(group) do
      if not run({j}) then return false end
    end
    return true
  end

  -- serial (LUMEN_BATCH_SERIAL=1, serial = true): render, wait, write, one
  -- group after the other; false when interrupted
  local function run_serial(group)
    local e = {group = group}
    e.ok, e.res = render(group, true)
    if stopped() then return false end
    if retry_alone(e) then return each_alone(run_serial, group) end
    return write_group(group, e.ok, e.res)
  end

  -- the pipeline: group k+1 is queued on the device before group k's files
  -- are written, so the device computes k+1 while the host encodes k.  A
  -- download waits for all the work queued (docs/VULKAN.md), so k's images
  -- are copied to the host before k+1 is queued; the NaN check runs there
  -- too, on the device, as the serial order runs it.
  local queued        -- {group=, ok=, res=}: rendered, not yet written
  local overlapped = 0
  local beside = 0    -- groups written inside the next one's generation
  local function fetch(e)
    e.ok, e.res = B.run_job(function()
      local nans = {}
      if o.nan_check then
        for k = 1, #e.group do
          nans[k] = {}
          for m, pr in ipairs(job_outs(e.res, k)) do nans[k][m] = has_nan(pr[2]) end
        end
      end
      local outs, ts = {}, {}
      for m, pr in ipairs(e.res.outs) do
        outs[m] = {pr[1], pr[2]:to("cpu")}
        ts[m] = outs[m][2]
      end
      lm.eval(table.unpack(ts))
      return {outs = outs, batch = e.res.batch, nans = nans}
    end)
  end
  fetch = TL.wrap("wait", fetch)
  -- takes the next group (nil: finish the one queued); false when interrupted
  local function run_piped(group)
    local prev = queued
    if prev then
      if prev.ok then fetch(prev) end
      if stopped() then return false end
      if retry_alone(prev) then   -- an error the device reported at the wait
        queued = nil
        return each_alone(run_piped, prev.group) and run_piped(group)
      end
    end
    local e
    -- prev's files are written while group renders when its render is a
    -- generation (pipe:generate runs lm._batch.busy's work once its first
    -- step is queued: a generation waits for its steps inside the render,
    -- so the write could not overlap them from here); else after it, as
    -- before.  written: nil (not run), or write_group's outcome
    local written
    if group then
      e = {group = group}
      if prev then
        B.busy(function()
          written = {B.outside_job(function() return write_group(prev.group, prev.ok, prev.res) end)}
        end)
      end
      e.ok, e.res = render(group, false)
      B.busy(nil)
      if written and not written[1] then error(written[2], 0) end
      if written and not written[2] then return false end
      if stopped() then return false end
    end
    queued = nil
    if prev then
      if e and e.ok then overlapped = overlapped + 1 end
      if written then beside = beside + 1
      elseif not write_group(prev.group, prev.ok, prev.res) then return false end
    end
    if e and retry_alone(e) then
      return each_alone(run_piped, group)
    elseif e and not e.ok then
      return write_group(group, false, e.res)   -- recorded as failed, after prev
    else
      queued = e
    end
    return true
  end

  local serial = o.serial
  if serial == nil then
    local env = os.getenv("LUMEN_BATCH_SERIAL")
    serial = env ~= nil and env ~= "" and env ~= "0"
  end
  local run_group = serial and run_serial or run_piped

  B.sigint(true)
  local t0 = B.now()
  local okrun, runerr = pcall(function()
    -- the jobs this process takes: all (one process), or chunks the
    -- distributor hands out in increasing index order
    -- the jobs in index order; nil once they are all handed out, and nil
    -- again after that (a signal during the last group's write, once the
    -- loop below has ended, reads it again to record the rest pending; a
    -- seed range's iterator must not be stepped past its end)
    local it
    do
      local step, ended = source(), false
      it = function()
        if ended then return nil end
        local index, p = step()
        ended = index == nil
        return index, p
      end
    end
    local lo, hi = 1, total
    local function claim()
      if not dist then return end
      lo, hi = dist.next(bs)
      if lo > total then lo = nil else hi = math.min(hi, total) end
    end
    claim()
    local group = {}
    local last_index = 0
    -- jobs handed to run_group and not yet recorded, in index order (the
    -- pipeline holds up to two groups): pending if the run stops
    local open = {}
    local function hand(g)
      for _, j in ipairs(g) do open[#open + 1] = j end
      if not run_group(g) then return false end
      local left = {}
      for _, j in ipairs(open) do if not j.recorded then left[#left + 1] = j end end
      open = left
      return true
    end
    while lo do
      if stopped() then interrupted = true; break end
      local index, p = it()
      if not index then break end
      last_index = index
      -- one process has one range, 1..total: nothing is past it
      while lo and index > hi do if dist then claim() else lo = nil end end
      if not lo then break end
      if index >= lo and (not only or index == only) then
        local files = files_of(index, p)
        local done, sizes, crcs = false, nil, nil
        if not only then done, sizes, crcs = complete(index, files) end
        if done then
          record(index, p, files, "exists", nil, sizes, crcs)
        else
          group[#group + 1] = {index = index, p = p, files = files}
        end
      end
      if #group > 0 and (#group >= bs or index == hi or index == only) then
        local g = group
        group = {}
        if not hand(g) then interrupted = true; break end
      end
      if only and index >= only then break end
      absorb()
    end
    if #group > 0 and not interrupted then
      if not hand(group) then interrupted = true end
      group = {}
    end
    -- the last group queued: written now
    if not interrupted and not serial and not run_piped(nil) then interrupted = true end
    if interrupted then
      -- what this process did not do: recorded as pending (a rerun makes them)
      local k = 0
      for _, g in ipairs{open, group} do
        for _, j in ipairs(g) do
          if not j.recorded then record(j.index, j.p, j.files, "pending") end
          k = j.index
        end
      end
      if not dist then
        while true do
          local index, p = it()
          if not index then break end
          if index > last_index and index > k and (not only or index == only) then
            record(index, p, files_of(index, p), "pending")
          end
        end
      end
    end
    if dist then
      dist.finish()
      while root and not dist.all_done() do absorb() end
      absorb()
    end
  end)
  local _, signo = B.sigint()
  if not okrun then
    B.sigint(false)
    if mf then mf:close() end
    error(runerr, 0)   -- mtmp_guard removes the temporary
  end
  if mf then
    -- a manifest that could not be written completely never takes the name;
    -- the run's handlers stay until it has (a signal now only counts)
    local okw, werr = mf:flush()
    mf:close()
    if okw then okw, werr = os.rename(mtmp, manifest) end
    if okw then B.tmp_forget(mtmp); mtmp = nil end
    if not okw then B.sigint(false); fail("manifest " .. manifest .. ": " .. tostring(werr)) end
  end
  B.sigint(false)
  local elapsed = B.now() - t0
  local grids, grid_failed = nil, 0
  if root then
    P.finish()
    if dist and mode ~= "off" then
      local per = {}
      for r = 1, dist.size do per[r] = tostring(P.by_rank[r] or 0) end
      io.stderr:write(string.format("batch: %d processes made %s images\n", dist.size, table.concat(per, " + ")))
    end
    if interrupted then io.stderr:write("batch: interrupted; run the same command again to finish\n") end
    for _, f in ipairs(failures) do io.stderr:write("batch: failed: ", f, "\n") end
    if P.failed > #failures then io.stderr:write(string.format("batch: ... %d failures in all\n", P.failed)) end
    if o.sheet and not interrupted then write_sheet(o.sheet, sheet_entries, o.sheet_size or 96) end
    -- an X/Y/Z plot's grids, once all their cells exist (this run's or a
    -- previous one's): written by the one process that writes the manifest
    if plot and not interrupted and not only then
      local problems
      grids, problems = B.xyz.write_grids(plot, o, files_of, write_file)
      for _, m in ipairs(problems) do io.stderr:write("batch: ", m, "\n") end
      if P.failed == 0 then grid_failed = #problems end
    end
  end
  local tl_all, tl_mine = TL.all(dist)
  if root and o.timeline then
    for _, r in ipairs(tl_all) do io.stderr:write("batch: timeline: ", TL.text(r), "\n") end
    local okt, terr = TL.write(o.timeline, tl_all)
    if not okt then io.stderr:write("batch: ", terr, "\n") end
  end
  return {total = only and 1 or total, done = P.done, made = P.made, existed = P.existed,
          failed = P.failed + grid_failed, pending = P.pending, grids = grids, interrupted = interrupted, seconds = elapsed,
          manifest = manifest, signal = interrupted and signo or nil, serial = serial,
          overlapped = overlapped, beside = beside, timeline = tl_mine}
end

lm.batch = lm._set_doc(lm.batch, "lm.batch",
  "lm.batch{script= | render=, render_batch=, seeds='1-16' | params=file | jobs={...},\n"
  .. "  out='out/%05d.png', only=, batch_size=1, nan_check=false, sheet=, sheet_max=64,\n"
  .. "  sheet_size=96, manifest=, progress='auto', names=, png={...}, args={...},\n"
  .. "  serial=false, xyz={'seed=1,2', ...}, grid=, font=, lora={'f.safetensors:0.8'}, lora_dir=}\n"
  .. "  -> summary\n"
  .. "Runs a render function once per job and writes its image(s) as PNG.  Jobs are seeds\n"
  .. "(a range like '1-1000'), the lines of a params file (.jsonl objects or .csv with a\n"
  .. "header) or the PNGs of a folder (path, file, stem); the function gets a table of the\n"
  .. "job's parameters (seed always set) and returns an image tensor, or a table of them\n"
  .. "named in names.  render_batch gets a list of parameter tables and returns images\n"
  .. "stacked on a leading axis (batch_size > 1).\n"
  .. "out: %05d is the job number (from 1), {seed} / {column} a parameter; distinct jobs\n"
  .. "must get distinct files.  Complete outputs are skipped (resume); an output folder\n"
  .. "belongs to one run at a time; failures are recorded and the rest go on; each PNG carries an\n"
  .. "A1111-style 'parameters' text and the manifest (JSON Lines, default beside the\n"
  .. "outputs) one record per job.  Ctrl-C stops after abandoning the current image.\n"
  .. "The next job's work is queued on the device before this one's files are written;\n"
  .. "serial = true (or LUMEN_BATCH_SERIAL=1) writes each before the next starts.\n"
  .. "args: what the script gets as ...  summary: total, done, made, existed, failed,\n"
  .. "pending, interrupted, seconds, serial, overlapped (groups written while the next was\n"
  .. "queued), beside (of those, written inside the next one's generation), grids (the X/Y/Z grids written), timeline (this process's seconds: start,\n"
  .. "load, generate = render + wait, write, idle, other, wall; images).  timeline = FILE\n"
  .. "writes every process's as JSON Lines (rank 0, after the run).  xyz: up to 3 axes expand\n"
  .. "the one job into the cells of an X/Y/Z plot, one job each; once all exist, the labelled\n"
  .. "grid(s) of lumen generate --xyz are written (grid=: the file).  lora / lora_dir: added\n"
  .. "to each job's params (lora joined by ';').  docs/BATCH.md has the details.")
