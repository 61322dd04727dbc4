/**
 * The Lua half of the generated dissectors: a small interpreter for the schema tables the
 * generator writes (one per declared message), run by Wireshark's Lua (5.2+). Each generated file
 * embeds its own copy, so the files load independently.
 *
 * Node kinds: int, i64, float, bool, bytes, string, array, struct, sized, union, custom, opaque.
 * Lengths: {t="fixed", n=…}, {t="prefix", p={n=…, le=…}}, {t="rest"}.
 * Conditions: the wire core's condition data (eq, ne, in, allBits, anyBits, noBits, and, or, not).
 */
export const LUA_RUNTIME = `
local gw = {}

-- A decode failure inside a message: caught per message, shown as an expert note.
local Short = {}

function gw.need(tvb, off, n, lim)
  if n < 0 or off + n > lim then error(Short, 0) end
end

function gw.range(tvb, off, n)
  if n == 0 then
    if tvb:len() == 0 then return tvb() end
    return tvb(math.min(off, tvb:len() - 1), 0)
  end
  return tvb(off, n)
end

function gw.uint(tvb, off, n, le, signed)
  local r = tvb(off, n)
  if le then
    if signed then return r:le_int() end
    return r:le_uint()
  end
  if signed then return r:int() end
  return r:uint()
end

local function bits_and(a, b) return bit32.band(a, b) end

function gw.cond(c, obj)
  if c == nil then return true end
  local op = c.op
  if op == "true" then return true end
  if op == "false" then return false end
  if op == "eq" then return obj[c.field] == c.value end
  if op == "ne" then return obj[c.field] ~= c.value end
  if op == "in" then
    for _, v in ipairs(c.values) do if obj[c.field] == v then return true end end
    return false
  end
  local v = obj[c.field]
  if op == "allBits" then return type(v) == "number" and bits_and(v, c.mask) == c.mask end
  if op == "anyBits" then return type(v) == "number" and bits_and(v, c.mask) ~= 0 end
  if op == "noBits" then return type(v) == "number" and bits_and(v, c.mask) == 0 end
  if op == "and" then return gw.cond(c.conditions[1], obj) and gw.cond(c.conditions[2], obj) end
  if op == "or" then return gw.cond(c.conditions[1], obj) or gw.cond(c.conditions[2], obj) end
  if op == "not" then return not gw.cond(c.condition, obj) end
  error("unknown condition " .. tostring(op))
end

-- Reads a length: returns the value and the bytes the prefix took.
function gw.length(L, tvb, off, lim)
  if L.t == "fixed" then return L.n, 0 end
  if L.t == "rest" then return lim - off, 0 end
  gw.need(tvb, off, L.p.n, lim)
  return gw.uint(tvb, off, L.p.n, L.p.le, false), L.p.n
end

function gw.hex(tvb, off, n)
  if n == 0 then return "" end
  return tostring(tvb(off, n):bytes()):lower()
end

gw.custom = {}

-- A tree that swallows everything: dry runs (does this layout fit these bytes exactly?).
gw.NULL_TREE = {}
local function null_tree(self) return self end
gw.NULL_TREE.add = null_tree
gw.NULL_TREE.add_le = null_tree
gw.NULL_TREE.add_expert_info = null_tree
gw.NULL_TREE.append_text = null_tree
gw.NULL_TREE.set_len = null_tree

-- Walks one node: adds its items under tree, returns the offset after it and its value.
function gw.walk(node, tvb, off, lim, tree)
  local k = node.k
  if k == "int" then
    gw.need(tvb, off, node.n, lim)
    local v = gw.uint(tvb, off, node.n, node.le, node.signed)
    if node.f then
      if node.le then tree:add_le(node.f, tvb(off, node.n)) else tree:add(node.f, tvb(off, node.n)) end
    end
    return off + node.n, v
  elseif k == "i64" then
    gw.need(tvb, off, 8, lim)
    local r = tvb(off, 8)
    local v
    if node.le then v = node.signed and r:le_int64() or r:le_uint64() else v = node.signed and r:int64() or r:uint64() end
    if node.f then
      if node.le then tree:add_le(node.f, r) else tree:add(node.f, r) end
    end
    return off + 8, tostring(v)
  elseif k == "float" then
    gw.need(tvb, off, node.n, lim)
    local r = tvb(off, node.n)
    local v = node.le and r:le_float() or r:float()
    if node.f then
      if node.le then tree:add_le(node.f, r) else tree:add(node.f, r) end
    end
    return off + node.n, v
  elseif k == "bool" then
    gw.need(tvb, off, 1, lim)
    local v = tvb(off, 1):uint()
    if v > 1 then error(Short, 0) end
    if node.f then tree:add(node.f, tvb(off, 1)) end
    return off + 1, v == 1
  elseif k == "bytes" then
    local n, p = gw.length(node.len, tvb, off, lim)
    gw.need(tvb, off + p, n, lim)
    if node.f then tree:add(node.f, gw.range(tvb, off + p, n)) end
    return off + p + n, gw.hex(tvb, off + p, n)
  elseif k == "string" then
    local n, p = gw.length(node.len, tvb, off, lim)
    local start = off
    off = off + p
    if node.nul and n == 0 and p > 0 then
      -- Quazal's empty String may be written 00 00 (no NUL).
      if node.f then tree:add(node.f, gw.range(tvb, start, p), "") end
      return off, ""
    end
    gw.need(tvb, off, n, lim)
    local textLen = node.nul and n - 1 or n
    local s = textLen > 0 and tvb(off, textLen):raw() or ""
    if node.f then tree:add(node.f, gw.range(tvb, start, p + n), s) end
    return off + n, s
  elseif k == "array" then
    local n, p = gw.length(node.len, tvb, off, lim)
    local sub = tree
    if node.f then sub = tree:add(node.f, gw.range(tvb, off, 0)) end
    off = off + p
    local values = {}
    if node.len.t ~= "rest" and node.counts == "bytes" then
      gw.need(tvb, off, n, lim)
      local stop = off + n
      while off < stop do
        local v
        off, v = gw.walk(node.el, tvb, off, stop, sub)
        values[#values + 1] = v
      end
    elseif node.len.t == "rest" then
      while off < lim do
        local v
        off, v = gw.walk(node.el, tvb, off, lim, sub)
        values[#values + 1] = v
      end
    else
      for _ = 1, n do
        local v
        off, v = gw.walk(node.el, tvb, off, lim, sub)
        values[#values + 1] = v
      end
    end
    return off, values
  elseif k == "struct" then
    local sub = tree
    if node.f then sub = tree:add(node.f, gw.range(tvb, off, 0)) end
    local obj = {}
    for _, fd in ipairs(node.fields) do
      if fd.cond == false then
        -- A condition the generator could not express: the rest stays undissected.
        sub:add_expert_info(PI_UNDECODED, PI_NOTE, "field " .. fd.name .. " has a condition gamewire cannot express in Lua")
        return lim, obj
      end
      if gw.cond(fd.cond, obj) then
        local v
        off, v = gw.walk(fd.node, tvb, off, lim, sub)
        if fd.const == nil then obj[fd.name] = v end
      end
    end
    return off, obj
  elseif k == "sized" then
    local n, p = gw.length({ t = "prefix", p = node.prefix }, tvb, off, lim)
    n = n - node.adjust
    gw.need(tvb, off + p, n, lim)
    local stop = off + p + n
    local after, v = gw.walk(node.inner, tvb, off + p, stop, tree)
    if after ~= stop then error(Short, 0) end
    return stop, v
  elseif k == "union" then
    gw.need(tvb, off, node.tag.n, lim)
    local tag = gw.uint(tvb, off, node.tag.n, node.tag.le, false)
    local variant = node.variants[tag]
    if variant == nil then error(Short, 0) end
    if node.tag.f then
      if node.tag.le then tree:add_le(node.tag.f, tvb(off, node.tag.n)) else tree:add(node.tag.f, tvb(off, node.tag.n)) end
    end
    return gw.walk(variant, tvb, off + node.tag.n, lim, tree)
  elseif k == "custom" then
    local h = gw.custom[node.name]
    if h == nil then
      if node.f then tree:add(node.f, gw.range(tvb, off, lim - off)) end
      return lim, gw.hex(tvb, off, lim - off)
    end
    return h(node, tvb, off, lim, tree)
  elseif k == "opaque" then
    if node.f then tree:add(node.f, gw.range(tvb, off, lim - off)) end
    return lim, gw.hex(tvb, off, lim - off)
  end
  error("unknown node kind " .. tostring(k))
end

-- Dissects one message node over tvb[off, lim) under a new protocol item; returns the end.
function gw.message(proto, node, tvb, off, lim, tree, label)
  local item = tree:add(proto, tvb(off, lim - off))
  local ok, after = pcall(gw.walk, node, tvb, off, lim, item)
  if not ok then
    item:add_expert_info(PI_MALFORMED, PI_ERROR, "malformed " .. label)
    return lim, false
  end
  item:append_text(": " .. label)
  return after, true
end

-- Per-conversation state for the stateful protocols, keyed by the two endpoints.
function gw.conv_key(pinfo)
  local a = tostring(pinfo.src) .. ":" .. pinfo.src_port
  local b = tostring(pinfo.dst) .. ":" .. pinfo.dst_port
  if a < b then return a .. "|" .. b end
  return b .. "|" .. a
end
`;
