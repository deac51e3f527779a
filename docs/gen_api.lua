-- gen_api.lua - writes docs/API.md from the docstrings registered by the
-- binding (lm.docs()).  Run with `make docs/API.md` or
--   build/lumen docs/gen_api.lua > docs/API.md
local lm = require "lumen"
local docs = lm.docs()

local groups = {
  {title = "Module functions (`lm.name(...)`)", match = function(n) return n:match("^lm%.[%w_]+$") end},
  {title = "Tensor methods (`t:name(...)`)", match = function(n) return n:match("^t:") end},
  {title = "Sub-modules", match = function(n) return n:match("^lm%.[%w_]+%.") end},
}

local out = {}
local function w(s) out[#out + 1] = s end

w("# Lumen Lua API reference")
w("")
w("Generated from the docstrings beside the bindings (`lua/l_*.c`) by `docs/gen_api.lua`;")
w("`help(x)` and `?x` in the REPL print the same text.  Load the module with")
w("`local lm = require \"lumen\"` (the `lumen` REPL preloads it as `lm` and `lumen`).")
w("")
w("## Conventions")
w("")
w("- Axes and indices are 1-based; negative values count from the end (`-1` is the last).")
w("  Index tensors (argmax, topk, sort and argsort results; `index_select`, `take_along_axis`,")
w("  `scatter`, `one_hot`, `embedding` inputs) are 1-based too; an index 0 is an error.")
w("  An index tensor's values are checked when the op is called, whether the tensor is")
w("  evaluated, lazy (it is evaluated then), a view or on another device: 0 and values past")
w("  the axis are errors naming the value, its position and the axis.  Only inside `lm.compile`")
w("  (a placeholder has no values yet) the check waits for the compiled function to run.")
w("- Error messages count axes from 1 as well, the core's included (its C API counts from 0;")
w("  the Lua layer shows every `axis N` it passes on as `axis N+1`).")
w("- Creation functions take their options inside the shape table too, as torch takes")
w("  `dtype=` beside the size: `lm.zeros{2, 3, dtype = \"f16\"}`, `lm.randn{2, seed = 1}`.")
w("- PyTorch's first-try names are aliases (`t:view`, `t:t()`, `t:mm`, `t:to(\"f16\")`,")
w("  `t:float()`, `t:numel()`, `t:dim()`, `lm.cat` ...); a torch method Lumen spells")
w("  otherwise is the error \"tensor has no method 'name' (in Lumen: ...)\"; other missing fields are nil.  `t:size()`")
w("  cannot be offered: `t.size` is numpy's element count (a number); use `t.shape`.")
w("- `lm.image.write_png` numbers a batch's files from 0 (`%03d` is the index in the batch),")
w("  while `lumen batch` numbers its jobs from 1.")
w("- Ranges in indexing are inclusive: `t[{ {2, 4}, {}, 3 }]` takes rows 2..4, every column")
w("  of axis 2 and element 3 of axis 3 (which removes that axis); `{start, stop, step}`")
w("  with a negative step runs backwards.  `t[i]` selects along axis 1.")
w("- Ops are lazy: they return tensors that are computed on `t:eval()`, `lm.eval(...)`,")
w("  printing, `t:item()`, `t:totable()` or a write to a file.")
w("- Operators `+ - * / % ^ //` and unary `-` are elementwise with broadcasting and accept")
w("  Lua numbers (which do not widen a tensor's dtype: f16 tensor + 2.5 stays f16).")
w("  `a // b` is `floor_divide`: integer tensors stay integer and the result is exact (rounded")
w("  toward -inf, as Python and PyTorch); an integer division by zero is an error.")
w("  Comparisons are methods (`t:lt(u)`...) because Lua turns `<` and `==` into one boolean.")
w("- `lm.tensor{...}` makes f32 from numbers and bool from booleans; `lm.arange` with")
w("  integer arguments makes i64.")
w("- Memory: tensors are freed when Lua collects them; the binding paces Lua's collector")
w("  by the bytes tensors hold (and switches it to incremental mode for that) and collects")
w("  fully once before failing an allocation.  `t:free()` and `local t <close> = ...`")
w("  free at once; `t:keep()` protects a tensor from `lm.sweep()`.")
w("- The neural-network functions (`lm.conv2d`, `lm.layer_norm`, `lm.attention`...) take")
w("  PyTorch's (torch.nn.functional's) parameters in PyTorch's order, positionally or by name")
w("  in a trailing table: `lm.conv2d(x, w, b, 1, 1)` is `lm.conv2d(x, w, b, {padding = 1})`.")
w("  docs/NN.md has the details.")
w("- **One rule for options and arguments**, everywhere (module functions, `lm.image.*`,")
w("  `lm.optim.*`, `lm.data.*` and tensor methods): an options table may hold only the names")
w("  the function documents, and a call with more positional arguments than its signature")
w("  lists is an error naming the function, so a misread signature never gives a silently")
w("  wrong number:")
w("")
w("  ```")
w("  > lm.save(\"x.png\", t, {bitz = 16})")
w("  lm.save: unknown option 'bitz' (known: format, layout, range, bits, level, text)")
w("  > lm.zeros{3}:sum(1, {}, true)")
w("  t:sum: too many arguments (3 given, at most 2)")
w("  ```")
w("")
w("  An option of another file format is unknown too (`bits` for a `.npy`).  Names that")
w("  PyTorch makes keyword-only are options here: `x:gelu{approximate = \"tanh\"}`, while")
w("  `x:gelu(\"tanh\")` is an error.  The limit comes from each docstring's signature (a")
w("  signature with `...`, as `lm.zeros(2, 3)`, leaves the count to the function).")
w("- Errors raise Lua errors naming the op, shapes and dtypes, e.g.")
w("  `add: shapes [2] and [3] cannot be broadcast`.")
w("")
w("## Printing")
w("")
w("`tostring(t)` evaluates `t` and prints it like numpy: nested rows, one number format")
w("chosen from the printed elements (fixed with up to 4 fraction digits, or scientific when")
w("the magnitudes call for it), right-aligned columns, rows wrapped at 80 columns, and past")
w("1000 elements only 3 items at each end of every long axis (only those are read back")
w("from the device).  A footer names dtype, shape and device:")
w("")
w("```")
w("> lm.arange(6):reshape{2, 3} / 4")
w("[[0.00, 0.25, 0.50],")
w(" [0.75, 1.00, 1.25]]")
w("<tensor f32 [2,3] cpu>")
w("```")
w("")
w("`t:brief()` gives the footer alone without evaluating (`lazy` when pending); the REPL")
w("uses it for tensors inside tables.  `lm.set_printoptions{precision=, threshold=,")
w("edgeitems=, linewidth=}` changes the format.")
w("")
w("## Timing")
w("")
w("`lm.clock()` is a monotonic wall clock in seconds (a float); `lm.sync([device])` waits")
w("until a device (every device when none is named) has finished its work.  Work is lazy, so")
w("evaluate what you time, as the REPL's `:time` does:")
w("")
w("```lua")
w("local t0 = lm.clock()")
w("local y = model(x):eval()")
w("lm.sync()")
w("print(string.format(\"%.1f ms\", (lm.clock() - t0) * 1000))")
w("```")
w("")
w("`os.clock()` is the process's CPU time summed over all threads, not wall time.")
w("")
w("## Asynchronous evaluation")
w("")
w("`lm.async_eval(a, b, ...)` and `t:eval{wait = false}` evaluate as `lm.eval` does but")
w("return once the work is queued on the GPU, so Lua builds the next graph (the next sampler")
w("step, the next image of a batch) while the GPU runs this one.  The rules:")
w("")
w("- Everything that needs the values waits for them: printing, `t:item()`, `t:totable()`,")
w("  `t:to(\"cpu\")`, writing a file, and any later evaluation that uses the tensor (it is")
w("  ordered after the queued work on the GPU, without a wait on the host).")
w("- `lm.sync()` waits for everything queued.  Time with it, as above.")
w("- An error a kernel reports on the GPU (an index out of range) is found before the call")
w("  returns: such kernels are waited for.  A device lost while work is queued is reported")
w("  by the next call that waits.")
w("- A tensor may be released while its work is queued: its memory is reused only after.")
w("- The host runs at most two command buffers ahead of the GPU (Vulkan's ring, below); then")
w("  the call waits for the oldest.  On the CPU, inside another evaluation and while")
w("  profiling (`lm.profile`), it is `lm.eval`.")
w("")
w("Within one evaluation the Vulkan backend already overlaps: it submits its command buffers")
w("without waiting (the first after 32 kernels, each next one twice as large up to 1024; at")
w("most three in flight), so the GPU runs while the rest is recorded.  `LUMEN_VK_RING=0`")
w("submits and waits for each, as before (for comparisons).")
w("")
w("## Properties")
w("")
w("`t.shape` (a new table of integers that prints as `{3, 64, 64}` and `==` another shape or table of the same sizes), `t.dtype` (\"f32\"...), `t.ndim`, `t.size`, `t.nbytes`, `t.device`")
w("(\"cpu\", \"vulkan:0\"), `t.evaluated`, `t.kept`, `t.freed`, `t.T` (last two axes swapped),")
w("`#t` (length of axis 1).")

-- an alias's docstring says "Alias of lm.x": list it under lm.x, not as an entry of its own
local aliases = {}
for n, d in pairs(docs) do
  local target = d:match("\nAlias of ([%w_.:]+)")
  if target then
    aliases[target] = aliases[target] or {}
    table.insert(aliases[target], n)
  end
end

for _, g in ipairs(groups) do
  local names = {}
  for n in pairs(docs) do
    -- lm.exp(t) is t:exp(): document it once, as the method
    local method = docs["t:" .. (n:match("^lm%.([%w_]+)$") or "")]
    local alias = docs[n]:match("\nAlias of ")
    local internal = n:match("^lm%._")   -- lm._vjp & co. serve the binding itself
    if g.match(n) and not alias and not internal and not (method and method == docs[n]) then
      names[#names + 1] = n
    end
  end
  table.sort(names)
  if #names > 0 then
    w("")
    w("## " .. g.title)
    if g.title:match("^Module") then
      w("")
      w("Every tensor method below is also a module function taking the tensor first:")
      w("`lm.exp(t)` is `t:exp()`, `lm.matmul(a, b)` is `a:matmul(b)`.")
    end
    for _, n in ipairs(names) do
      local d = docs[n]
      local sig, rest = d:match("^([^\n]*)\n?(.*)$")
      w("")
      w("### `" .. sig .. "`")
      if rest ~= "" then w(""); w(rest) end
      local also = aliases[n] or aliases[n:gsub("^t:", "lm.")]
      if also then
        table.sort(also)
        for i, a in ipairs(also) do also[i] = "`" .. a .. "`" end
        w(""); w("Also as " .. table.concat(also, ", ") .. " (PyTorch's name).")
      end
    end
  end
end
io.write(table.concat(out, "\n"), "\n")
