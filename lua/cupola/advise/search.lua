--- cupola.advise.search: the search on the limit that framework modules
-- share: the limits under which a replay does what a recording shows (the
-- limit the recorded run had; cupola.advise's `limit_interval`).
local search = {}

--- search.limit_interval(side, a, peak) -> {low =, high =, replays =} or
-- nil: the limits under which a replay does what the recording shows, where
-- side(L) says -1 (L too low: the model was refused, or gave memory back,
-- where the run did not), 0 (the recorded run) or 1 (too high: the model got
-- what the run was refused, or kept what it gave back); nil: no telling.
-- A limit only decides comparisons of what is held plus a request against
-- it, so the limits that give the recorded run make one interval; it is
-- found by bisection above a (too low, or below anything held), up to
-- twice the peak of the replay without a limit and 1 GiB, where every
-- comparison comes out as without one (a model may compare a request's
-- whole size with the limit, not only the part it maps).  Each end is kept
-- only where it replays to the recording (the decisions need not be
-- monotone everywhere).
function search.limit_interval(side, a, peak)
  local replays = 0
  local function at(L)
    replays = replays + 1
    return side(L)
  end
  local b = peak <= (math.maxinteger - (1 << 30)) // 2 and 2 * peak + (1 << 30) or math.maxinteger
  if at(b) ~= 1 then return nil end
  -- the least L not too low, in (a, b]
  local lo, hi = a, b
  while hi - lo > 1 do
    local mid = lo + (hi - lo) // 2
    local v = at(mid)
    if v == nil then return nil end
    if v >= 0 then hi = mid else lo = mid end
  end
  local low = hi
  if at(low) ~= 0 then return nil end
  -- the greatest L not too high, in [low, b)
  lo, hi = low, b
  while hi - lo > 1 do
    local mid = lo + (hi - lo) // 2
    local v = at(mid)
    if v == nil then return nil end
    if v <= 0 then lo = mid else hi = mid end
  end
  local high = lo
  if high > low and at(high) ~= 0 then high = low end
  return { low = low, high = high, replays = replays }
end

return search
