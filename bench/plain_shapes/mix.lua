-- SAP-like mix: 70% sticky (sap-contextid, JSESSIONID in the table, affinity cookie; a third
-- each), 30% balanced; ~4 KiB of cookies on every request; paths over 1000 URL rules.
-- env: MIX_SESSIONS (file of "JSESSIONID=..; kwd_affinity=..;" lines), MIX_MODE=kwd|haproxy
local mode = os.getenv("MIX_MODE") or ((wrk.port == "19281") and "haproxy" or "kwd")
local sessions = {}
for line in io.lines(os.getenv("MIX_SESSIONS")) do
  if #line > 3 then sessions[#sessions + 1] = line end
end
local pad = "MYSAPSSO2=" .. string.rep("AjQxMDMBABhKAEEAVgBBACAAIAAgACAAIAAgACAAIAACAAYwADAAMQADABAATgBTAFAAIAAgACAAIAAg", 50)
pad = pad:sub(1, 4000)
local reqs = {}
math.randomseed(42)
for i = 1, 1000 do
  local path = "/sap/app" .. math.random(0, 999) .. "/page" .. i
  local r = math.random(100)
  local cookie
  if r <= 30 then
    cookie = pad
  elseif mode == "haproxy" then
    cookie = "SERVERID=" .. ((r % 3 == 0) and "B" or "A") .. "; " .. pad
  else
    local s = sessions[math.random(#sessions)]
    local j = s:match("(JSESSIONID=[^;]*)")
    local a = s:match("(kwd_affinity=[^;]*)")
    if r <= 53 then
      cookie = "sap-contextid=SID:ANON:" .. ((r % 3 == 0) and "B" or "A") .. ":" .. i .. "; " .. pad
    elseif r <= 76 then
      cookie = j .. "; " .. pad
    else
      cookie = a .. "; " .. pad
    end
  end
  reqs[i] = wrk.format("GET", path, {["Host"] = "bench.example", ["Cookie"] = cookie})
end
local n = 0
request = function()
  n = n % 1000 + 1
  return reqs[n]
end
