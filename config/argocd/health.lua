-- Argo CD health check for neurondra.io NeuronDRAConfig (docs/gitops.md has how to install it). Like kstatus it
-- reads status.observedGeneration against metadata.generation, then the abnormal-true conditions Stalled (Degraded)
-- and Reconciling (Progressing); Ready=True is Healthy. status.phase "Paused" (the operator's report of spec.paused,
-- which kstatus does not read) is Suspended. Written for the Lua 5.1 Argo CD embeds (gopher-lua); tests/gitops.rs
-- runs it with Debian's lua5.1 over statuses the operator computed.
local hs = { status = "Progressing", message = "waiting for the operator to report a status" }
local status = obj.status
if status == nil or status.observedGeneration == nil then
  return hs
end
if obj.metadata.generation ~= nil and status.observedGeneration ~= obj.metadata.generation then
  hs.message = "waiting for the operator to observe generation " .. tostring(obj.metadata.generation)
  return hs
end
local conditions = {}
for _, condition in ipairs(status.conditions or {}) do
  conditions[condition.type] = condition
end
local function holds(type)
  return conditions[type] ~= nil and conditions[type].status == "True"
end
local function says(type)
  return conditions[type].reason .. ": " .. conditions[type].message
end
if status.phase == "Paused" then
  hs.status = "Suspended"
  hs.message = "spec.paused: the operator changes nothing"
elseif holds("Stalled") then
  hs.status = "Degraded"
  hs.message = says("Stalled")
elseif holds("Reconciling") then
  hs.message = says("Reconciling")
elseif holds("Ready") then
  hs.status = "Healthy"
  hs.message = conditions["Ready"].message
  -- Sick devices never make the config Degraded (a fleet always has some); the message says so.
  if conditions["DevicesHealthy"] ~= nil and conditions["DevicesHealthy"].status == "False" then
    hs.message = hs.message .. "; " .. conditions["DevicesHealthy"].message
  end
else
  hs.message = "Ready is not True: see the config's conditions"
end
return hs
