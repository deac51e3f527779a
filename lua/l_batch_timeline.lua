
-- l_batch_timeline.lua - where each process of lm.batch spends its time
-- (issue 39: the per-rank timeline a run over several GPUs is profiled
-- with).  Embedded after lua/l_batch.lua in the same chunk; lm.batch takes
-- one B.timeline_new(o) per call.  Stages, in seconds of this process's
-- wall clock (they do not overlap; what no stage holds is "other": the job
-- list, resume checks, the manifest, rank 0's records):
--   start     `lumen batch` started -> lm.batch called (the Lua state, lumen.so)
--   load      lm.batch called -> the script loaded (the device chosen, the
--             script's top level: a pipeline's weights)
--   render    the render functions: building the graphs and queuing them (and
--             waiting for them with serial = true)
--   wait      waiting for the device and copying the images to the host
--             (the pipelined order; the device works during write)
--   write     encoding and writing the PNGs and their records
--   idle      waiting on the other processes: the next chunk of jobs, the
--             start word, and (rank 0) the others' last records
-- generate = render + wait.  Under MPI every rank sends its record to rank
-- 0 before its done message (a record with a negative index: rank 0's
-- poll keeps those apart), and rank 0 writes them all.
do
  local lm = ...
  local B = lm._batch

  local STAGES = {"start", "load", "render", "wait", "write", "idle"}

  function B.timeline_new(o)
    local now = B.now
    local t_enter = now()
    local t0 = type(o._t0) == "number" and o._t0 <= t_enter and o._t0 or t_enter
    -- S: seconds by stage
    local S = {start = t_enter - t0, load = 0, render = 0, wait = 0, write = 0, idle = 0}
    local T = {images = 0, groups = 0, others = {}}
    local last = t_enter

    -- the time since the last mark goes to stage
    function T.mark(stage)
      local t = now()
      S[stage] = S[stage] + (t - last)
      last = t
    end

    -- f, its time counted in stage (an error passes through, uncounted),
    -- less the time of the wrapped calls it makes (the previous group's
    -- write inside a generation's render is write's, not render's)
    local inner = 0   -- seconds of wrapped calls inside the running one
    function T.wrap(stage, f)
      return function(...)
        local t, outer = now(), inner
        inner = 0
        local function done(...)
          local d = now() - t
          S[stage] = S[stage] + d - inner
          inner = outer + d
          return ...
        end
        return done(f(...))
      end
    end

    -- render: also counts the groups
    function T.wrap_render(f)
      local g = T.wrap("render", f)
      return function(...)
        T.groups = T.groups + 1
        return g(...)
      end
    end

    -- record(index, p, files, status, ...): counts the images this process made
    function T.wrap_record(f)
      return function(index, p, files, status, ...)
        if status == "ok" then T.images = T.images + 1 end
        return f(index, p, files, status, ...)
      end
    end

    -- this process's record (a table), as of now
    function T.record(dist)
      local wall = now() - t0
      local r = {rank = dist and dist.rank or 0, local_rank = dist and dist.local_rank or 0,
                 images = T.images, groups = T.groups, wall = wall}
      local ok, dev = pcall(function() return tostring(lm.device()) end)
      r.device = ok and dev or "?"
      -- under MPI: the CPUs the rank ran on and its CPU threads
      if dist and dist.cpus then r.cpus, r.threads, r.unbound = dist.cpus, dist.threads, dist.unbound end
      local sum = 0
      for _, s in ipairs(STAGES) do
        r[s] = S[s]
        sum = sum + S[s]
      end
      r.generate = S.render + S.wait
      r.other = math.max(0, wall - sum)
      return r
    end

    -- one JSON line, keys in a fixed order
    function T.json(r)
      local parts = {string.format('"rank":%d,"local_rank":%d,"device":%s,"images":%d,"groups":%d',
        r.rank, r.local_rank, B.json_encode(r.device), r.images, r.groups)}
      for _, s in ipairs{"start", "load", "generate", "render", "wait", "write", "idle", "other", "wall"} do
        parts[#parts + 1] = string.format('"%s_s":%.3f', s, r[s])
      end
      for _, k in ipairs{"cpus", "threads", "unbound"} do
        if math.type(r[k]) == "integer" then parts[#parts + 1] = string.format('"%s":%d', k, r[k]) end
      end
      return "{" .. table.concat(parts, ",") .. "}"
    end

    -- a line for stderr
    function T.text(r)
      local cpu = ""
      if math.type(r.cpus) == "integer" then
        cpu = string.format(", CPUs %d, threads %d", r.cpus, r.threads or 0)
        if (r.unbound or 0) > 0 then cpu = cpu .. string.format(" (unbound from %d)", r.unbound) end
      end
      return string.format("rank %d (%s%s): start %.2f s, load %.2f s, generate %.2f s (render %.2f, wait %.2f), "
        .. "write %.2f s, idle %.2f s, other %.2f s; %d images in %.2f s",
        r.rank, r.device, cpu, r.start, r.load, r.generate, r.render, r.wait, r.write, r.idle, r.other,
        r.images, r.wall)
    end

    -- the `_dist` table with its waits counted as idle, the others' records
    -- taken out of poll (rank 0), and this rank's sent before finish (others)
    function T.dist(d)
      if not d then return nil end
      local w = setmetatable({}, {__index = d})
      w.next = T.wrap("idle", d.next)
      w.start = T.wrap("idle", d.start)
      w.all_done = T.wrap("idle", d.all_done)
      function w.poll()
        local keep = {}
        for _, m in ipairs(d.poll()) do
          if m.index < 0 then
            local r = B.json_decode(m.line)
            if type(r) == "table" then T.others[m.rank] = r end
          else
            keep[#keep + 1] = m
          end
        end
        return keep
      end
      function w.finish()
        if d.rank ~= 0 then d.send(-1, T.json(T.record(d))) end
        return d.finish()
      end
      return w
    end

    -- every process's record, by rank (rank 0: after the others finished)
    function T.all(dist)
      local mine = T.record(dist)
      local recs = {mine}
      for _, r in pairs(T.others) do
        -- keys as T.record names them
        local c = {}
        for k, v in pairs(r) do c[(k:gsub("_s$", ""))] = v end
        recs[#recs + 1] = c
      end
      table.sort(recs, function(a, b) return a.rank < b.rank end)
      return recs, mine
    end

    -- the file: one JSON line per process, by rank; written under a
    -- temporary name and renamed
    function T.write(path, recs)
      local tmp = path .. ".tmp"
      local f, err = io.open(tmp, "w")
      if not f then return nil, "timeline " .. path .. ": " .. tostring(err) end
      for _, r in ipairs(recs) do f:write(T.json(r), "\n") end
      local ok, werr = f:close()
      if ok then ok, werr = os.rename(tmp, path) end
      if not ok then
        os.remove(tmp)
        return nil, "timeline " .. path .. ": " .. tostring(werr)
      end
      return true
    end

    return T
  end
  B.timeline_new = lm._set_doc(B.timeline_new, "lm._batch.timeline_new",
    "lm._batch.timeline_new(options) -> timeline\nlm.batch's per-process stage clock (internal).")
end
