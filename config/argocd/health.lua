-- Argo CD health check for neurondra.io NeuronDRAConfig (docs/gitops.md has how to install it). Like kstatus it
-- reads status.observedGeneration against metadata.generation, then the abnormal-true conditions Stalled (Degraded)
-- and Reconciling (Progressing); Ready=True is Healthy. status.phase "Paused" (the operator's report of spec.paused,
-- which kstatus does not read) is Suspended. Written for the Lua 5.1 Argo CD embeds (gopher-lua); tests/gitops.rs
-- runs it with Debian's lua5.1 over statuses the operator computed, and over conditions without a reason or message
-- (optional in a Condition as another writer may leave it): every field it reads may be missing.
local hs = { status = "Progressing", message = "waiting for the operator to report a status" }
local status = obj.status
if status == nil or status.observedGeneration == nil then
  return hs
end
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and status.observedGeneration ~= generation then
  hs.message = "waiting for the operator to observe generation " .. tostring(generation)
  return hs
end
local conditions = {}
for _, condition in ipairs(status.conditions or {}) do
  if condition.type ~= nil then
    conditions[condition.type] = condition
  end
end
-- A field of a condition as text: "" when it is missing (nil) or not a string.
local function text(value)
  if type(value) == "string" then
    return value
  end
  return ""
end
local function holds(type)
  return conditions[type] ~= nil and conditions[type].status == "True"
end
local function says(type)
  local reason, message = text(conditions[type].reason), text(conditions[type].message)
  if message == "" then
    return reason
  end
  return reason .. ": " .. message
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
  hs.message = text(conditions["Ready"].message)
  -- Sick devices never make the config Degraded (a fleet always has some); the message says so.
  local devices = conditions["DevicesHealthy"]
  if devices ~= nil and devices.status == "False" and text(devices.message) ~= "" then
    hs.message = hs.message .. "; " .. text(devices.message)
  end
else
  hs.message = "Ready is not True: see the config's conditions"
end
return hs
