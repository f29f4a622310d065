-- The SAP-like request mix for wrk (scripts/bench-proxies.sh, shape "sapmix").
--
--   wrk -t1 -c64 -d5s -s bench/sap_mix.lua http://127.0.0.1:PORT/ -- AFFINITY SESSIONS INSTANCES
--
-- Deterministic: init() builds 1,000 requests once and request() sends them
-- in a fixed cycle (no per-request Lua work beyond an index). In every ten:
--   3  sap-contextid cookie naming an ABAP instance (an even, ABAP URL rule);
--      instances 2:1 like the backends' weights;
--   2  JSESSIONID cookie sid1..sidSESSIONS, learned by the proxy in the
--      warm-up from the backend's Set-Cookie (an odd, Java URL rule);
--   2  the proxy's own affinity cookie (kwd_affinity token, HAProxy's
--      SERVERID, nginx's route), taken from the warm-up (a Java rule);
--   3  no session identifier: balanced (ABAP and Java rules alternately).
-- 70% sticky, 30% balanced. Every request carries exactly COOKIE_BYTES
-- (4,096) bytes of Cookie header value: sap-usercontext, a MYSAPSSO2-like
-- logon ticket as filler, and the identifier last.
--
-- Arguments after "--":
--   1 AFFINITY   affinity cookies "name=value", several separated by "|"
--   2 SESSIONS   how many JSESSIONIDs the warm-up made known (default 1000)
--   3 INSTANCES  ABAP instance names "first|second" (default sapa_ERP_00|sapb_ERP_01)
--   4 COOKIE_BYTES (default 4096)

local requests = {}
local count = 0
local index = 0

local function split(text)
  local parts = {}
  for part in string.gmatch(text or "", "[^|]+") do
    parts[#parts + 1] = part
  end
  return parts
end

-- URL rules are /sap/bc/app<N>/ for N in 0..999: even N belong to the ABAP
-- group, odd N to the Java group. kind 0 = ABAP, 1 = Java.
local function path(kind, i)
  local rule = ((i * 7919) % 500) * 2 + kind
  return "/sap/bc/app" .. rule .. "/ui/page.htm?sap-language=EN"
end

-- A deterministic base64-looking ticket of `bytes` characters.
local function filler(bytes)
  local alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
  local out = {}
  local state = 12345
  for n = 1, bytes do
    state = (state * 1103515245 + 12345) % 2147483648
    local k = math.floor(state / 65536) % 64 + 1
    out[n] = string.sub(alphabet, k, k)
  end
  return table.concat(out)
end

function init(args)
  local affinity = split(args[1])
  if #affinity == 0 then
    affinity = { "kwd_affinity=missing" }
  end
  local sessions = tonumber(args[2] or "") or 1000
  local instances = split(args[3] or "sapa_ERP_00|sapb_ERP_01")
  local cookie_bytes = tonumber(args[4] or "") or 4096
  local head = "sap-usercontext=sap-language%3dEN%26sap-client%3d001; MYSAPSSO2="
  local ticket = filler(cookie_bytes)

  local function cookies(identifier)
    local tail = identifier and ("; " .. identifier) or ""
    local pad = cookie_bytes - #head - #tail
    return head .. string.sub(ticket, 1, pad) .. tail
  end

  for i = 0, 999 do
    local slot = i % 10
    local cycle = math.floor(i / 10)
    local target, identifier
    if slot < 3 then
      target = path(0, i)
      local instance = instances[((cycle * 3 + slot) % 3 == 2) and 2 or 1]
      identifier = string.format("sap-contextid=SID%%3aANON%%3a%s%%3aVXJs82VIOdbyJChzNHUb%05d-ATT",
                                 instance, i)
    elseif slot < 5 then
      target = path(1, i)
      identifier = "JSESSIONID=sid" .. ((cycle * 2 + slot - 3) % sessions + 1)
    elseif slot < 7 then
      target = path(1, i)
      identifier = affinity[(cycle * 2 + slot - 5) % #affinity + 1]
    else
      target = path(slot % 2, i)
    end
    requests[i + 1] = wrk.format("GET", target,
                                 { ["Host"] = "erp.example.com", ["Cookie"] = cookies(identifier) })
  end
  count = #requests
end

function request()
  index = index % count + 1
  return requests[index]
end
