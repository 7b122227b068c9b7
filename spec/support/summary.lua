-- A busted output handler: the usual terminal output, plus the counts
-- written to $CUPOLA_SUMMARY for spec/run.lua.
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
  return handler
end
