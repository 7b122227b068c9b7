-- A busted output handler: the usual terminal output, plus the counts
-- written to $CUPOLA_SUMMARY for spec/run.lua.
--
-- CUPOLA_SPEC_PROGRESS=1 adds one line per case as it starts and as it ends
-- (status, seconds, and a failure's message at once), and one per describe
-- block (whose setup may be what takes the time): a run stopped by a
-- timeout then names the case it was in, and what failed before it.
return function(options)
  local busted = require "busted"
  local handler = require "busted.outputHandlers.utfTerminal"(options)
  busted.subscribe({ "suite", "end" }, function()
    local path = os.getenv "CUPOLA_SUMMARY"
    if path then
      local f = assert(io.open(path, "w"))
      f:write(string.format("%d %d %d %d\n", handler.successesCount, handler.failuresCount,
        handler.errorsCount, handler.pendingsCount))
      f:close()
    end
    return nil, true
  end)

  if os.getenv "CUPOLA_SPEC_PROGRESS" then
    local clock = os.time
    local ok_cupola, cupola = pcall(require, "cupola")
    if ok_cupola and cupola.clock then clock = cupola.clock end
    local started, t_suite = {}, clock()
    local function where(element)
      local t = element.trace
      return t and t.short_src and (t.short_src .. ":" .. t.currentline .. ": ") or ""
    end
    local function line(s)
      io.write("\n", string.format("[%7.1fs] ", clock() - t_suite), s, "\n")
      io.flush()
    end
    local function message(m)
      if type(m) ~= "string" then m = require("pl.pretty").write(m) end
      return ((m or "nil"):gsub("\n", " / "))
    end
    busted.subscribe({ "describe", "start" }, function(element)
      line("describe " .. where(element) .. handler.getFullName(element))
      return nil, true
    end)
    busted.subscribe({ "test", "start" }, function(element)
      started[element] = clock()
      line("start    " .. where(element) .. handler.getFullName(element))
      return nil, true
    end)
    busted.subscribe({ "test", "end" }, function(element, _, status)
      local s = started[element] and clock() - started[element] or 0
      line(string.format("%-8s %.2fs %s%s", status, s, where(element), handler.getFullName(element)))
      return nil, true
    end)
    -- failures and errors as they happen, in a case or in a block's setup
    for _, kind in ipairs { "FAILURE", "ERROR" } do
      busted.subscribe({ kind:lower() }, function(element, _, msg)
        line(string.format("%-8s %s%s: %s", kind, where(element), handler.getFullName(element), message(msg)))
        return nil, true
      end)
    end
  end
  return handler
end
