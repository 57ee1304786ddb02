package redisstore

// The two scripts mirror gcra.Decide and gcra.Settle. Times are integer
// nanoseconds split as now_s (Unix seconds) and now_ns (0..1e9-1), because a
// Lua number (a double) holds whole nanoseconds exactly only up to 2^53,
// about 104 days, not Unix time. A TAT is stored as its decimal Unix
// nanoseconds and only ever used as TAT - now, which is exact. Numbers that
// go back into redis.call go through string.format('%d'), since Lua's own
// conversion keeps 14 digits.
//
// Rate hash fields: r (requests), i (input tokens), o (output tokens). A
// field is absent when its dimension is fully replenished.

// common defines the helpers both scripts start with.
const common = `
local now_s = tonumber(ARGV[1])
local now_ns = tonumber(ARGV[2])
local now_ms = now_s * 1000 + math.floor(now_ns / 1000000)
local fields = {'r', 'i', 'o'}

-- backlog is max(TAT - now, 0) in ns for a stored TAT (or false).
local function backlog(v)
  if not v then return 0 end
  local n = string.len(v)
  local s, ns = 0, tonumber(v)
  if n > 9 then
    s = tonumber(string.sub(v, 1, n - 9))
    ns = tonumber(string.sub(v, n - 8))
  end
  if s - now_s < -1 then return 0 end
  local d = (s - now_s) * 1000000000 + (ns - now_ns)
  if d < 0 then return 0 end
  return d
end

-- tat is the stored form of now + b.
local function tat(b)
  local t = now_ns + b
  local carry = math.floor(t / 1000000000)
  local rem = t - carry * 1000000000
  if rem < 0 then carry, rem = carry - 1, rem + 1000000000 end
  if rem >= 1000000000 then carry, rem = carry + 1, rem - 1000000000 end
  return string.format('%d%09d', now_s + carry, rem)
end

local function int(x)
  return string.format('%d', x)
end

-- save writes the backlogs b (only those with set[k]) and sets the
-- hash's expiry to the largest backlog plus margin ms, or deletes it.
local function save(b, set, margin)
  local hset, hdel, most = {}, {}, 0
  for k = 1, 3 do
    if set[k] then
      if b[k] > 0 then
        hset[#hset + 1] = fields[k]
        hset[#hset + 1] = tat(b[k])
      else
        hdel[#hdel + 1] = fields[k]
      end
    end
    if b[k] > most then most = b[k] end
  end
  if most == 0 then
    redis.call('DEL', KEYS[1])
    return
  end
  if #hset > 0 then redis.call('HSET', KEYS[1], unpack(hset)) end
  if #hdel > 0 then redis.call('HDEL', KEYS[1], unpack(hdel)) end
  redis.call('PEXPIRE', KEYS[1], int(math.ceil(most / 1000000) + margin))
end

-- read returns the three backlogs.
local function read()
  local v = redis.call('HMGET', KEYS[1], 'r', 'i', 'o')
  return {backlog(v[1]), backlog(v[2]), backlog(v[3])}
end

-- clamp keeps a reply inside int64.
local function clamp(x)
  if x > 4e18 then return 4e18 end
  return x
end
`

// reserveScript decides and charges one Reserve.
//
// KEYS: rate hash, lease sorted set, today's total.
// ARGV: now_s, now_ns; then tolerance and cost (ns) for requests, input and
// output (tolerance 0: not limited); concurrency cap, lease ID, lease TTL
// (ms); tokens-per-day cap, the amount's tokens, ns until midnight, the day
// key's TTL (ms); the rate hash's expiry margin (ms); the concurrency
// retry hint (ns).
//
// Reply: {allowed 0/1, denied (0 none, 1 tokens_per_day, 2 concurrency,
// 3 requests, 4 input_tokens, 5 output_tokens), retry (ns), backlogs (ns)
// of requests, input and output after the decision}.
const reserveScript = common + `
local tol = {tonumber(ARGV[3]), tonumber(ARGV[5]), tonumber(ARGV[7])}
local cost = {tonumber(ARGV[4]), tonumber(ARGV[6]), tonumber(ARGV[8])}
local conc_cap, lease_ttl = tonumber(ARGV[9]), tonumber(ARGV[11])
local day_cap, day_tokens = tonumber(ARGV[12]), tonumber(ARGV[13])
local margin = tonumber(ARGV[16])

local denied, retry, too_large = 0, 0, false
local function wait(dim, r)
  if denied == 0 then denied = dim end
  if not too_large and r > retry then retry = r end
end
local function too_big(dim)
  if not too_large then
    too_large, denied, retry = true, dim, 0
  end
end

if day_cap > 0 then
  local total = tonumber(redis.call('GET', KEYS[3]) or '0')
  if day_tokens > day_cap then
    too_big(1)
  elseif total + day_tokens > day_cap then
    wait(1, tonumber(ARGV[14]))
  end
end

redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', int(now_ms))
if conc_cap > 0 then
  if redis.call('ZCARD', KEYS[2]) >= conc_cap then
    wait(2, tonumber(ARGV[17]))
  end
end

local limited = {tol[1] > 0, tol[2] > 0, tol[3] > 0}
local any = limited[1] or limited[2] or limited[3]
local b = {0, 0, 0}
local charged = {0, 0, 0}
if any then
  b = read()
  for k = 1, 3 do
    if limited[k] then
      local after = b[k] + cost[k]
      if cost[k] > tol[k] then
        too_big(k + 2)
      elseif after > tol[k] then
        wait(k + 2, after - tol[k])
      end
      charged[k] = after
    end
  end
end

if denied ~= 0 then
  local out = {0, 0, 0}
  for k = 1, 3 do
    if limited[k] then out[k] = clamp(b[k]) end
  end
  return {0, denied, clamp(retry), out[1], out[2], out[3]}
end

if day_cap > 0 and day_tokens > 0 then
  if redis.call('INCRBY', KEYS[3], ARGV[13]) == day_tokens then
    redis.call('PEXPIRE', KEYS[3], ARGV[15])
  end
end

-- Every allowed reserve's lease is kept, with or without a concurrency
-- cap: a settle whose reserve call failed applies only if it is there.
redis.call('ZADD', KEYS[2], int(now_ms + lease_ttl), ARGV[10])
local keep = lease_ttl + margin
if redis.call('PTTL', KEYS[2]) < keep then
  redis.call('PEXPIRE', KEYS[2], int(keep))
end

if any then
  for k = 1, 3 do
    if limited[k] then b[k] = charged[k] end
  end
  save(b, limited, margin)
end

return {1, 0, 0, clamp(charged[1]), clamp(charged[2]), clamp(charged[3])}
`

// settleScript applies one Settle.
//
// KEYS: rate hash, lease sorted set, the total of the reservation's day.
// ARGV: now_s, now_ns; the TAT move (ns, 0: none) of requests, input and
// output; lease ID; the day total's delta (0: none) and the day key's TTL
// (ms); the rate hash's expiry margin (ms); 1 when it applies only if the
// lease is held (the reserve's call failed), else 0.
//
// Reply: 1, or 0 when it did not apply.
const settleScript = common + `
if redis.call('ZREM', KEYS[2], ARGV[6]) == 0 and ARGV[10] == '1' then
  return 0
end

local delta = {tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])}
local moved = {delta[1] ~= 0, delta[2] ~= 0, delta[3] ~= 0}
if moved[1] or moved[2] or moved[3] then
  local b = read()
  for k = 1, 3 do
    if moved[k] then
      b[k] = b[k] + delta[k]
      if b[k] < 0 then b[k] = 0 end
    end
  end
  save(b, moved, tonumber(ARGV[9]))
end

local dd = tonumber(ARGV[7])
if dd ~= 0 then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    local v = redis.call('INCRBY', KEYS[3], ARGV[7])
    if v < 0 then redis.call('INCRBY', KEYS[3], int(-v)) end
  elseif dd > 0 then
    redis.call('SET', KEYS[3], ARGV[7], 'PX', ARGV[8])
  end
end

return 1
`
