-- basics.lua - a tour of the Lua API.  Run: build/lumen samples/basics.lua
-- (or: lua5.4 -e 'package.cpath="build/?.so;"..package.cpath' samples/basics.lua)
local lm = require "lumen"

-- creation: shapes are tables, numbers become f32
local x = lm.tensor{{1, 2, 3}, {4, 5, 6}}
local w = lm.randn({3, 2}, {seed = 42})
print(x)

-- ops build a lazy graph; printing (or :eval(), :item()) computes it
local y = (x:matmul(w) + 1):relu()
print(y:brief())          -- <tensor f32 [2,2] cpu lazy>
print(y)

-- 1-based axes and inclusive ranges
print(x:sum(1))           -- column sums
print(x[{{}, {2, 3}}])    -- columns 2..3
print(x[-1])              -- the last row
print(x:argmax(2))        -- 1-based indices of each row's largest

-- comparisons are methods; where picks elementwise
print(lm.where(x:gt(3), x, 0))

-- in-place writes go into evaluated tensors
local z = lm.zeros{2, 3}
z[{1, {}}] = 7
print(z)

-- errors name the op and the shapes, and the state stays usable
local ok, err = pcall(function() return x:matmul(x) end)
print(ok, err)

-- help is beside every function
lm.help(lm.arange)
