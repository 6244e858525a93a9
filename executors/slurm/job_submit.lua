--[[
gpuplan job_submit hook for Slurm's job_submit/lua plugin (tested with Slurm 22.05.8).

Install: copy this file next to slurm.conf as job_submit.lua and set `JobSubmitPlugins=lua`
(slurmctld reads the script at each submission; a syntax error makes slurmctld refuse to start,
so test it on a lab first: `python -m tests.labs.slurm.lab up --job-submit-lua`).

What it does, and why:

1. Opt-in. A job is *engine-managed* when it is submitted to one of ENGINE_PARTITIONS or its
   `--comment` starts with COMMENT_TAG ("gpuplan"). Every other job is left untouched, so the hook
   can be deployed on a shared cluster without changing anyone else's jobs.
2. Hold. An engine-managed job is held at submit (priority 0) and marked in `admin_comment`
   ("gpuplan:held;gpus=N;min=A;max=B"). Slurm never starts it by itself; the gpuplan engine (an
   operator) picks the GPU count and the nodes, updates the job and releases it. Without the hold,
   backfill would start it wherever Slurm likes and the engine's plan would drift.
3. Elasticity. `--comment gpuplan:min=1,max=8` (',' or ';' between fields) gives the range of GPU
   counts the job accepts; without it the job is rigid (min = max = requested). A request outside
   its own range is rejected at submit time with a message to the user.
4. Normalised GPU requests. `--gpus=N` / `--gpus=type:N` (a per-job count) becomes a per-node
   request (`tres_per_node`): one node when N fits on a node (<= MAX_GPUS_PER_NODE), otherwise
   N / MAX_GPUS_PER_NODE whole nodes when that divides evenly; with an explicit `-N k`, N / k per
   node when k divides N. The engine then sees "nodes x GPUs per node", the only shape Slurm can
   enforce per node; an uneven request stays a per-job count.
5. One comment grammar. A comment that starts with COMMENT_TAG must follow the grammar of
   docs/slurm.md ("The comment grammar"), which parse_comment below implements check for check
   and message for message with the controller's parser (executors/slurm/comments.py; the
   tests run a corpus through both): known keys only, each at most once, plain decimal numbers
   within bounds (no hex, no inf/nan), printable ASCII, at most 1024 characters. Anything else is
   refused at submit with the grammar's message, so the controller never sees a held job it
   cannot read. `run=` is reserved for gpuplan's own executor (submitted by an operator uid);
   GPU counts must lie in [1, MAX_ENGINE_GPUS], so no user can make the controller allocate
   for "max=1000000000" or hold a job for ever.
6. Node shape. The marker also records the request's shape for the controller: `nodes=N` (the
   node count after normalisation), `gpn=G` (GPUs per node when the request is per node) and
   `ranks=1` when the job starts its own ranks on every node (an explicit `--ntasks-per-node`,
   or `ranks` / `ranks=1` in the comment, e.g. `--comment gpuplan:ranks,min=2,max=8`). A job that
   does not start ranks is a single-node job for the engine (its batch step sees only the first
   node's GPUs), so the controller never splits it over nodes.
7. No bypass. Users (any uid not in OPERATOR_UIDS) may not modify an engine-managed job:
   `scontrol release` is a job update, so without this check the owner could release the held job
   and run it unmanaged. Users can still `scancel` their jobs (cancel is not an update).

Pure Lua, no I/O, no external commands: the hook runs inside slurmctld under its job write lock,
so anything slow here stalls the whole controller.
--]]

-- The gpuplan release this hook belongs to (the package's version): `gpuplan slurm-controller
-- --check` compares it with its own, so a hook left behind by an upgrade is caught before the
-- controller starts. Keep this line as it is when you edit the site settings below.
local GPUPLAN_HOOK_VERSION = "0.1.0"
local ENGINE_PARTITIONS = { gpuplan = true }
local COMMENT_TAG = "gpuplan"
local MARK = "gpuplan:"
-- GPUs of the site's largest node (the lab rewrites this line to its own node size).
local MAX_GPUS_PER_NODE = 8
-- GPUs of the managed partition(s): no engine job may ask for more, in its request or its
-- max= (the lab rewrites this line to its own size). The controller checks the same bound
-- against the partition it sees, so an outdated value here cannot stall it.
local MAX_ENGINE_GPUS = 1024
-- Bounds of the numbers a user may put in the comment (the controller's grammar has the same).
local MAX_WORK = 1e15              -- work= (iterations)
local MAX_DURATION_S = 315360000   -- duration= (ten years)
local MAX_RATE = 1e9               -- rate= (iterations per second per GPU)
-- uid 0 is root (and SlurmUser in the lab). Add the SlurmUser and the engine's service account
-- here at a real site, e.g. OPERATOR_UIDS[64030] = true.
local OPERATOR_UIDS = { [0] = true }

local NO_VAL = 4294967294

local function starts_with(s, prefix)
    return s ~= nil and string.sub(s, 1, #prefix) == prefix
end

-- "gres:gpu:a100:2" / "gres:gpu:2" / "gpu:2" -> type (or nil), count (or nil)
local function parse_gpu_tres(spec)
    if spec == nil or spec == "" then
        return nil, nil
    end
    for item in string.gmatch(spec, "[^,]+") do
        local body = string.gsub(item, "^gres[:/]", "")
        local gtype, count = string.match(body, "^gpu:([^:]+):(%d+)$")
        if count ~= nil then
            return gtype, tonumber(count)
        end
        count = string.match(body, "^gpu[:=](%d+)$")
        if count ~= nil then
            return nil, tonumber(count)
        end
    end
    return nil, nil
end

-- Counts are formatted with %d: under Lua 5.3/5.4 a division yields a float and plain
-- concatenation would write "gres:gpu:2.0", which Slurm refuses.
local function gpu_tres(gtype, count)
    if gtype ~= nil then
        return string.format("gres:gpu:%s:%d", gtype, count)
    end
    return string.format("gres:gpu:%d", count)
end

-- a finite number in (0, hi], or nil
local function bounded_number(value, hi)
    value = tonumber(value)
    if value == nil or value ~= value or value <= 0 or value > hi then
        return nil
    end
    return value
end

-- a whole number in [1, hi], or nil
local function bounded_count(value, hi)
    value = bounded_number(value, hi)
    if value == nil or value < 1 or math.floor(value) ~= value then
        return nil
    end
    return value
end

-- A count for messages: "%.0f" never fails (Lua 5.3's "%d" raises on floats like 1e20).
local function show_count(value)
    return string.format("%.0f", value)
end

-- ---------------------------------------------------------------- the comment grammar
-- The same grammar, checks and messages as executors/slurm/comments.py (see docs/slurm.md).
-- Only patterns and functions common to Lua 5.1, 5.3 and 5.4; character classes are written
-- as explicit ASCII ranges so slurmctld's locale cannot widen them.
local MAX_COMMENT = 1024
local MAX_KEY = 32
local MAX_DECIMAL = 32
local MAX_COUNT_DIGITS = 6
local MAX_NAME = 64
local MAX_ENCODED = 768
-- key -> { type, upper bound of a decimal }
local KEYS = {
    min = { "count" }, max = { "count" },
    work = { "decimal", MAX_WORK }, duration = { "decimal", MAX_DURATION_S },
    rate = { "decimal", MAX_RATE },
    ranks = { "flag" },
    model = { "name" }, run = { "name" },
    id = { "encoded" },
}

local function show(text)
    return string.sub(text, 1, 20)
end

-- digits [ "." digits ] [ ("e"|"E") [sign] 1-3 digits ]
local function is_decimal(text)
    local rest = string.match(text, "^[0-9]+(.*)$")
    if rest == nil then
        return false
    end
    if string.sub(rest, 1, 1) == "." then
        rest = string.match(rest, "^%.[0-9]+(.*)$")
        if rest == nil then
            return false
        end
    end
    if rest == "" then
        return true
    end
    local exponent = string.match(rest, "^[eE][+-]?([0-9]+)$")
    return exponent ~= nil and #exponent <= 3
end

-- the typed value of one field, or nil and the message
local function field_value(key, rule, text)
    local kind = rule[1]
    if text == nil then
        if kind == "flag" then
            return 1
        end
        return nil, string.format("%s needs a value (%s=...)", key, key)
    end
    if text == "" then
        return nil, string.format("%s= has an empty value", key)
    end
    if kind == "count" then
        if #text > MAX_COUNT_DIGITS or not string.match(text, "^[0-9]+$") or
                tonumber(text) < 1 then
            return nil, string.format("%s=%s must be a whole number in [1, 999999]", key,
                                      show(text))
        end
        return tonumber(text)
    end
    if kind == "decimal" then
        local value = nil
        if #text <= MAX_DECIMAL and is_decimal(text) then
            value = tonumber(text)
        end
        if value == nil or value ~= value or value == math.huge or value <= 0 or
                value > rule[2] then
            return nil, string.format("%s=%s must be a decimal number in (0, %g]", key,
                                      show(text), rule[2])
        end
        return value
    end
    if kind == "flag" then
        if text ~= "0" and text ~= "1" then
            return nil, string.format("%s=%s must be 0 or 1", key, show(text))
        end
        return tonumber(text)
    end
    if kind == "name" then
        if #text > MAX_NAME or not string.match(text, "^[A-Za-z0-9_.%-]+$") then
            return nil, string.format("%s=%s must be 1 to %d of A-Z a-z 0-9 _ . -", key,
                                      show(text), MAX_NAME)
        end
        return text
    end
    if #text > MAX_ENCODED or not string.match(text, "^[A-Za-z0-9%%_.~%-]+$") then
        return nil, string.format("%s=%s must be 1 to %d of A-Z a-z 0-9 %% _ . ~ -", key,
                                  show(text), MAX_ENCODED)
    end
    return text
end

-- "gpuplan:min=1,max=8;work=5e4" -> { min = 1, max = 8, work = 50000 }; {} for a comment
-- that is not gpuplan's; nil and the message for a gpuplan comment outside the grammar.
local function parse_comment(comment)
    if comment == nil or not starts_with(comment, COMMENT_TAG) then
        return {}
    end
    -- Characters first: once they are ASCII, Lua's byte length and Python's character
    -- length are the same number.
    if string.find(comment, "[^!-~]") then
        return nil, "comment must be printable ASCII without spaces"
    end
    if #comment > MAX_COMMENT then
        return nil, string.format("comment is longer than %d characters", MAX_COMMENT)
    end
    local rest = string.sub(comment, #COMMENT_TAG + 1)
    if rest == "" then
        return {}
    end
    if string.sub(rest, 1, 1) ~= ":" then
        return nil, string.format("comment must be '%s' or '%s:FIELDS'", COMMENT_TAG,
                                  COMMENT_TAG)
    end
    local body = string.sub(rest, 2)
    local fields = {}
    if body == "" then
        return fields
    end
    local pos = 1
    while true do
        local stop = string.find(body, "[,;]", pos)
        local item
        if stop == nil then
            item = string.sub(body, pos)
        else
            item = string.sub(body, pos, stop - 1)
        end
        if item == "" then
            return nil, "empty field (two separators in a row, or one at an end)"
        end
        local key, text = item, nil
        local eq = string.find(item, "=", 1, true)
        if eq ~= nil then
            key, text = string.sub(item, 1, eq - 1), string.sub(item, eq + 1)
        end
        if #key > MAX_KEY or not string.match(key, "^[A-Za-z][A-Za-z0-9_]*$") then
            return nil, string.format("key '%s' must be a letter followed by letters, " ..
                                      "digits or _", show(key))
        end
        local rule = KEYS[key]
        if rule == nil then
            return nil, string.format("unknown key '%s'", key)
        end
        if fields[key] ~= nil then
            return nil, string.format("duplicate key '%s'", key)
        end
        local value, message = field_value(key, rule, text)
        if value == nil then
            return nil, message
        end
        fields[key] = value
        if stop == nil then
            break
        end
        pos = stop + 1
    end
    return fields
end

-- For tests: tests/slurm/test_comment_grammar.py loads this file with a stub `slurm` table and
-- runs its corpus through this very function (slurmctld itself never calls it by this name).
gpuplan_hook = { parse_comment = parse_comment }

local function is_engine_job(job_desc)
    local part = job_desc.partition
    if part ~= nil then
        for name in string.gmatch(part, "[^,]+") do
            if ENGINE_PARTITIONS[name] then
                return true
            end
        end
    end
    return starts_with(job_desc.comment, COMMENT_TAG)
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    if not is_engine_job(job_desc) then
        return slurm.SUCCESS
    end

    -- The comment first: a gpuplan comment outside the grammar is refused with its message.
    local opts, problem = parse_comment(job_desc.comment)
    if opts == nil then
        slurm.log_user("gpuplan: %s", problem)
        return slurm.ERROR
    end
    if opts.run ~= nil and not OPERATOR_UIDS[submit_uid] then
        slurm.log_user("gpuplan: run= in the comment is reserved for gpuplan's own executor")
        return slurm.ERROR
    end

    -- Normalise the GPU request to nodes x GPUs per node (job_desc changes only on success).
    -- Integer arithmetic throughout (math.floor, "%d"): Lua 5.3/5.4 make every "/" a float.
    local explicit_nodes = job_desc.min_nodes ~= nil and job_desc.min_nodes ~= NO_VAL and
                           job_desc.min_nodes > 0
    local nodes = explicit_nodes and job_desc.min_nodes or 1
    local gtype, per_node = parse_gpu_tres(job_desc.tres_per_node)
    local total
    local per_node_tres = nil
    if per_node ~= nil then
        total = per_node * nodes
    else
        local jtype, per_job = parse_gpu_tres(job_desc.tres_per_job)
        if per_job == nil then
            slurm.log_user("gpuplan: engine-managed jobs must request GPUs (--gpus or --gres=gpu:N)")
            return slurm.ERROR
        end
        gtype, total = jtype, per_job
        if explicit_nodes then
            -- -N k --gpus=n: an even split is the same request per node; an uneven one stays
            -- a per-job count (Slurm picks the split).
            if per_job % nodes == 0 then
                per_node = math.floor(per_job / nodes)
            end
        elseif per_job <= MAX_GPUS_PER_NODE then
            per_node = per_job
        elseif per_job % MAX_GPUS_PER_NODE == 0 then
            nodes = math.floor(per_job / MAX_GPUS_PER_NODE)
            per_node = MAX_GPUS_PER_NODE
        end
        per_node_tres = per_node
    end

    -- Elasticity from the comment; rigid when absent. GPU counts are bounded by the partition.
    if bounded_count(total, MAX_ENGINE_GPUS) == nil then
        slurm.log_user("gpuplan: GPU request %s must be in [1, %d]", show_count(total),
                       MAX_ENGINE_GPUS)
        return slurm.ERROR
    end
    for _, key in ipairs({ "min", "max" }) do
        if opts[key] ~= nil and bounded_count(opts[key], MAX_ENGINE_GPUS) == nil then
            slurm.log_user("gpuplan: %s=%s must be a whole number in [1, %d]", key,
                           show_count(opts[key]), MAX_ENGINE_GPUS)
            return slurm.ERROR
        end
    end
    local min_gpus = opts.min or total
    local max_gpus = opts.max or total
    if max_gpus < min_gpus or total < min_gpus or total > max_gpus then
        slurm.log_user("gpuplan: GPU request %d is outside the job's range min=%d max=%d",
                       total, min_gpus, max_gpus)
        return slurm.ERROR
    end

    -- The request's shape: nodes, GPUs per node, whether the job starts its own ranks.
    local ntpn = job_desc.ntasks_per_node
    local ranks = opts.ranks == 1 or (ntpn ~= nil and ntpn > 0 and ntpn < 65534)
    local shape = string.format(";nodes=%d", nodes)
    if per_node ~= nil then
        shape = shape .. string.format(";gpn=%d", per_node)
    end
    if ranks then
        shape = shape .. ";ranks=1"
    end

    -- Hold for the engine and leave the marker it polls for.
    if per_node_tres ~= nil then
        job_desc.tres_per_node = gpu_tres(gtype, per_node_tres)
        job_desc.tres_per_job = ""
        job_desc.min_nodes = nodes
        job_desc.max_nodes = nodes
    end
    job_desc.priority = 0
    job_desc.requeue = 1
    job_desc.admin_comment = string.format("%sheld;gpus=%d;min=%d;max=%d%s", MARK, total,
                                           min_gpus, max_gpus, shape)
    slurm.log_info("gpuplan: held job from uid %d: gpus=%d min=%d max=%d tres_per_node=%s",
                   submit_uid, total, min_gpus, max_gpus, tostring(job_desc.tres_per_node))
    slurm.log_user("gpuplan: job held for the GPU engine (min=%d max=%d GPUs)", min_gpus, max_gpus)
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    if OPERATOR_UIDS[modify_uid] then
        return slurm.SUCCESS
    end
    if starts_with(job_rec.admin_comment, MARK) then
        -- (22.05 discards slurm.log_user() in job_modify: the user sees "Access/permission
        -- denied"; the reason goes to the controller's log.)
        slurm.log_info("gpuplan: refused update of engine job %u by uid %u: only an operator " ..
                       "may change or release it", job_rec.job_id, modify_uid)
        return slurm.ESLURM_ACCESS_DENIED
    end
    return slurm.SUCCESS
end

slurm.log_info("gpuplan job_submit.lua loaded")
return slurm.SUCCESS
