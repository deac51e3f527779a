-- tests/show/term.lua DIR - run by tests/show/run.sh inside a terminal:
-- writes DIR/proto (lm.show_protocol's name and why), shows the test
-- pattern, writes DIR/shown, then waits (at most 60 s) for DIR/done so the
-- window stays up for the screenshot.
local lm = require 'lumen'
local dir = arg[1]
local pattern = dofile((arg[0]:gsub('term%.lua$', 'pattern.lua')))
local p, why = lm.show_protocol()
local f = assert(io.open(dir .. '/proto', 'w'))
f:write(p, '\n', why, '\n')
f:close()
local ok, how = lm.show(pattern(96, 'CHW'))
f = assert(io.open(dir .. '/shown', 'w'))
f:write(tostring(ok), ' ', tostring(how), '\n')
f:close()
for _ = 1, 600 do
  local d = io.open(dir .. '/done')
  if d then d:close(); break end
  os.execute('sleep 0.1')
end
