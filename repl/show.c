/* show.c - the REPL's helpers written in Lua: how values print, :time's
 * wrapper, :mem and ?name.  Kept in Lua because they are about Lua values;
 * compiled once at start-up into a table in the registry. */
#include <string.h>
#include <lauxlib.h>
#include "show.h"

static const char HELPERS[] =
"local lm = ...\n"
"local H = {}\n"
"local is_tensor = lm.is_tensor\n"
"local function key_str(k)\n"
"  if type(k) == 'string' and k:match('^[%a_][%w_]*$') then return k end\n"
"  if type(k) == 'string' then return string.format('[%q]', k) end\n"
"  return '[' .. tostring(k) .. ']'\n"
"end\n"
"local pretty\n"
"local function value_str(v, depth, seen)\n"
"  if is_tensor(v) then return v:brief() end\n"
"  if type(v) == 'string' then return string.format('%q', v) end\n"
"  if type(v) == 'table' then return pretty(v, depth, seen) end\n"
"  return tostring(v)\n"
"end\n"
"-- a table on one line when short, else one entry per line; never\n"
"-- evaluates a tensor inside it (v:brief())\n"
"pretty = function(t, depth, seen)\n"
"  local mt = getmetatable(t)\n"
"  if mt and mt.__tostring then return tostring(t) end\n"
"  if seen[t] then return '<cycle>' end\n"
"  if depth > 2 then return '{...}' end\n"
"  seen[t] = true\n"
"  local items, n = {}, rawlen(t)\n"
"  for i = 1, math.min(n, 50) do items[#items + 1] = value_str(rawget(t, i), depth + 1, seen) end\n"
"  if n > 50 then items[#items + 1] = '...' end\n"
"  local keys = {}\n"
"  for k in next, t do\n"
"    if not (math.type(k) == 'integer' and k >= 1 and k <= n) then keys[#keys + 1] = k end\n"
"  end\n"
"  table.sort(keys, function(a, b)\n"
"    local ta, tb = type(a), type(b)\n"
"    if ta ~= tb then return ta < tb end\n"
"    if ta == 'string' or ta == 'number' then return a < b end\n"
"    return tostring(a) < tostring(b)\n"
"  end)\n"
"  for i, k in ipairs(keys) do\n"
"    if i > 50 then items[#items + 1] = '...'; break end\n"
"    items[#items + 1] = key_str(k) .. ' = ' .. value_str(rawget(t, k), depth + 1, seen)\n"
"  end\n"
"  seen[t] = nil\n"
"  local one = '{' .. table.concat(items, ', ') .. '}'\n"
"  if #one <= 78 and not one:find('\\n') then return one end\n"
"  local pad = string.rep('  ', depth + 1)\n"
"  return '{\\n' .. pad .. table.concat(items, ',\\n' .. pad) .. '\\n' .. string.rep('  ', depth) .. '}'\n"
"end\n"
"function H.show(...)\n"
"  local out = {}\n"
"  for i = 1, select('#', ...) do\n"
"    local v = select(i, ...)\n"
"    if type(v) == 'table' then out[i] = pretty(v, 0, {})\n"
"    else out[i] = tostring(v) end\n"
"  end\n"
"  io.write(table.concat(out, '\\t'), '\\n')\n"
"end\n"
"function H.timed(f, t0)\n"
"  local r = table.pack(f())\n"
"  local ts = {}\n"
"  for i = 1, r.n do if is_tensor(r[i]) then ts[#ts + 1] = r[i] end end\n"
"  if #ts > 0 then lm.eval(table.unpack(ts)) end\n"
"  return t0, table.unpack(r, 1, r.n)\n"
"end\n"
"function H.profiled(f)\n"
"  local r = table.pack(lm.profile(f))\n"
"  return table.unpack(r, 1, r.n - 1)\n"
"end\n"
"local function bytes(n)\n"
"  if n < 1024 then return string.format('%d B', n) end\n"
"  local units = {'KiB', 'MiB', 'GiB', 'TiB'}\n"
"  local u = 0\n"
"  repeat n = n / 1024; u = u + 1 until n < 1024 or u == #units\n"
"  return string.format('%.1f %s', n, units[u])\n"
"end\n"
"function H.mem()\n"
"  for _, d in ipairs(lm.devices()) do\n"
"    local m = lm.memory(d.spec)\n"
"    io.write(string.format('%-10s active %s, peak %s, cache %s, limit %s%s\\n', d.spec,\n"
"      bytes(m.active), bytes(m.peak), bytes(m.cache), m.limit > 0 and bytes(m.limit) or 'none',\n"
"      m.total > 0 and (', device ' .. bytes(m.total)) or ''))\n"
"  end\n"
"  io.write(string.format('%d live tensors, Lua heap %s\\n', lm.live(), bytes(math.floor(collectgarbage('count') * 1024))))\n"
"end\n"
"function H.help(name)\n"
"  if name == '' then return lm.help() end\n"
"  local d = lm.doc(name)\n"
"  if d then return lm.help(name) end\n"
"  local expr = name:gsub(':([%w_]+)$', '.%1')\n"
"  local f = load('return ' .. expr, '=help')\n"
"  if f then\n"
"    local ok, v = pcall(f)\n"
"    if ok and v ~= nil then return lm.help(v) end\n"
"  end\n"
"  io.write('no documentation for ', name, '\\n')\n"
"end\n"
"return H\n";

bool lm_repl_show_init(lua_State *L)
{
    if (luaL_loadbuffer(L, HELPERS, sizeof HELPERS - 1, "=repl") != LUA_OK) return false;
    lua_getglobal(L, "lm");
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) return false;
    lua_setfield(L, LUA_REGISTRYINDEX, "lumen.repl");
    return true;
}

void lm_repl_push_helper(lua_State *L, const char *name)
{
    lua_getfield(L, LUA_REGISTRYINDEX, "lumen.repl");
    lua_getfield(L, -1, name);
    lua_remove(L, -2);
}
