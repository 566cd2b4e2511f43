-- ARGV: step cause call_id tool_message tool_event step_event failed_event update
-- One expected call of the tools phase has its result (the first result per call
-- counts); the last one joins them all and starts the next step. `update`: the state
-- keys a tool's Command(update=...) sets, as a JSON list [key, value JSON, ...], or
-- empty; kept with the call and applied to the task's state at the join, in call order.

-- The end of the JSON string that starts at i (the index after its closing quote).
local function string_end(text, i)
  local j = i + 1
  while true do
    local found = string.find(text, '[\\"]', j)
    if string.sub(text, found, found) == '"' then return found + 1 end
    j = found + 2
  end
end

-- The end of the JSON value that starts at i (the index after it).
local function value_end(text, i)
  local c = string.sub(text, i, i)
  if c == '"' then return string_end(text, i) end
  if c ~= '{' and c ~= '[' then return string.find(text, '[,}%]%s]', i) or #text + 1 end
  local depth, j = 0, i
  while true do
    local found = string.find(text, '[%[%]{}"]', j)
    local d = string.sub(text, found, found)
    if d == '"' then
      j = string_end(text, found)
    else
      if d == '{' or d == '[' then depth = depth + 1 else depth = depth - 1 end
      j = found + 1
      if depth == 0 then return j end
    end
  end
end

-- The state's fields with `pairs` (key, value JSON, ...) set: the JSON object is split
-- into its members as text and joined again, so the values it keeps are not re-encoded
-- (cjson would turn [] into {} and round numbers).
local function merged(text, pairs)
  local keys, values = {}, {}
  local i = string.find(text or '', '{', 1, true)
  if i then
    i = i + 1
    while true do
      i = string.find(text, '[}"]', i)
      if string.sub(text, i, i) == '}' then break end
      local key_end = string_end(text, i)
      local key = cjson.decode(string.sub(text, i, key_end - 1))
      local start = string.find(text, '[^%s:]', key_end)
      i = value_end(text, start)
      if values[key] == nil then keys[#keys + 1] = key end
      values[key] = string.sub(text, start, i - 1)
    end
  end
  for n = 1, #pairs, 2 do
    if values[pairs[n]] == nil then keys[#keys + 1] = pairs[n] end
    values[pairs[n]] = pairs[n + 1]
  end
  local out = {}
  for _, key in ipairs(keys) do out[#out + 1] = cjson.encode(key) .. ': ' .. values[key] end
  return '{' .. table.concat(out, ', ') .. '}'
end

local function apply_updates(expected)
  local extra = redis.call('HGET', KEYS[1], 'extra')
  for _, id in ipairs(expected) do
    local update = redis.call('HGET', KEYS[8], id .. ':update')
    if update then extra = merged(extra, cjson.decode(update)) end
  end
  if extra then redis.call('HSET', KEYS[1], 'extra', extra) end
  redis.call('HDEL', KEYS[1], 'updates')
end

local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase', 'expected', 'updates')
if s[1] ~= 'running' or s[2] ~= arg.step or s[3] ~= 'tools' then return snapshot(0) end
local expected = cjson.decode(s[4])
if not is_expected(expected, arg.call_id) then return snapshot(0) end
if redis.call('HSETNX', KEYS[4], arg.call_id, arg.tool_message) == 0 then return snapshot(0) end
local updates = s[5]
if arg.update ~= '' then
  redis.call('HSET', KEYS[8], arg.call_id .. ':update', arg.update)
  redis.call('HSET', KEYS[1], 'updates', 1)
  updates = '1'
end
log(arg.tool_event)
if redis.call('HLEN', KEYS[4]) >= #expected then
  redis.call('HSET', KEYS[1], 'cause', arg.cause)
  if updates then apply_updates(expected) end
  advance(tonumber(arg.step), expected, arg.step_event, arg.failed_event)
end
return snapshot(1)
