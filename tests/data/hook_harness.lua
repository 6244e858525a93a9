--[[
Test harness for executors/slurm/job_submit.lua (used by tests/slurm/test_comment_grammar.py).

Loads the REAL hook with a stub `slurm` table (what slurmctld's job_submit/lua plugin provides)
and runs cases through it. Usage:

  lua hook_harness.lua JOB_SUBMIT_LUA parse CASES    one hex-encoded comment per line; prints
      "OK<TAB>key=value<TAB>..." (keys sorted, numbers as %.17g) or "ERR<TAB>message"
  lua hook_harness.lua JOB_SUBMIT_LUA submit CASES   one submission per line, TAB-separated
      hex fields: comment, tres_per_node, tres_per_job, min_nodes, ntasks_per_node, uid
      (empty = unset), submitted to the engine partition "gpuplan"; prints "rc<TAB>messages<TAB>tres_per_node<TAB>tres_per_job<TAB>
      min_nodes<TAB>admin_comment". Numbers reach the hook as floats, as Slurm pushes them
      (lua_pushnumber), so Lua 5.3/5.4 float formatting shows up here as it would in slurmctld.
Plain Lua 5.1-5.4, no modules.
--]]

local script, mode, cases = arg[1], arg[2], arg[3]
local messages = {}
slurm = {
    SUCCESS = 0, ERROR = -1, ESLURM_ACCESS_DENIED = 2002,
    log_info = function(fmt, ...) local _ = string.format(fmt, ...) end,
    log_debug = function(fmt, ...) local _ = string.format(fmt, ...) end,
    log_user = function(fmt, ...) messages[#messages + 1] = string.format(fmt, ...) end,
}
local loaded = dofile(script)
assert(loaded == slurm.SUCCESS, "job_submit.lua must return slurm.SUCCESS")
assert(type(slurm_job_submit) == "function" and type(slurm_job_modify) == "function")

local function unhex(text)
    return (string.gsub(text, "%x%x", function(h) return string.char(tonumber(h, 16)) end))
end

local function show(value)
    if type(value) == "number" then
        return string.format("%.17g", value)
    end
    return tostring(value)
end

local function split_tabs(line)
    local out, pos = {}, 1
    while true do
        local stop = string.find(line, "\t", pos, true)
        out[#out + 1] = string.sub(line, pos, (stop or 0) - 1)
        if stop == nil then
            return out
        end
        pos = stop + 1
    end
end

for line in io.lines(cases) do
    if mode == "parse" then
        local fields, problem = gpuplan_hook.parse_comment(unhex(line))
        if fields == nil then
            print("ERR\t" .. problem)
        else
            local keys = {}
            for key in pairs(fields) do
                keys[#keys + 1] = key
            end
            table.sort(keys)
            local out = { "OK" }
            for _, key in ipairs(keys) do
                out[#out + 1] = key .. "=" .. show(fields[key])
            end
            print(table.concat(out, "\t"))
        end
    else
        local f = split_tabs(line)
        local function text(i) local t = unhex(f[i] or "") if t == "" then return nil end return t end
        local function number(i) local t = text(i) if t == nil then return nil end return tonumber(t) + 0.0 end
        messages = {}
        local job_desc = {
            comment = text(1), tres_per_node = text(2), tres_per_job = text(3),
            min_nodes = number(4), ntasks_per_node = number(5), partition = "gpuplan",
        }
        local rc = slurm_job_submit(job_desc, {}, number(6) or 1000)
        print(table.concat({ tostring(rc), table.concat(messages, " | "),
                             show(job_desc.tres_per_node or ""), show(job_desc.tres_per_job or ""),
                             show(job_desc.min_nodes or ""), show(job_desc.admin_comment or "") },
                           "\t"))
    end
end
