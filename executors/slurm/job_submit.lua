--[[
gpuplan job_submit hook for Slurm's job_submit/lua plugin (tested with Slurm 22.05.8).

Install: copy this file next to slurm.conf as job_submit.lua and set `JobSubmitPlugins=lua`
(slurmctld reads the script at each submission; a syntax error makes slurmctld refuse to start,
so test it on a lab first: `python -m gpuplan.executors.slurm.lab up --job-submit-lua`).

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
5. Bounded values. Every number taken from the user (GPU request, min, max, work, duration, rate)
   must be a finite number within the bounds below; `run=` is reserved for gpuplan's own
   executor (submitted by an operator uid). Anything else is refused at submit with a message,
   so no user can make the controller allocate for "max=1000000000" or hold a job for ever.
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

local ENGINE_PARTITIONS = { gpuplan = true }
local COMMENT_TAG = "gpuplan"
local MARK = "gpuplan:"
-- GPUs of the site's largest node (the lab rewrites this line to its own node size).
local MAX_GPUS_PER_NODE = 8
-- GPUs of the managed partition(s): no engine job may ask for more, in its request or its
-- max= (the lab rewrites this line to its own size). The controller checks the same bound
-- against the partition it sees, so an outdated value here cannot stall it.
local MAX_ENGINE_GPUS = 1024
-- Bounds of the numbers a user may put in the comment (the controller enforces the same).
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

local function gpu_tres(gtype, count)
    if gtype ~= nil then
        return "gres:gpu:" .. gtype .. ":" .. count
    end
    return "gres:gpu:" .. count
end

-- a finite number in (0, hi], or nil
local function bounded_number(text, hi)
    local value = tonumber(text)
    if value == nil or value ~= value or value <= 0 or value > hi then
        return nil
    end
    return value
end

-- a whole number in [1, hi], or nil
local function bounded_count(text, hi)
    local value = bounded_number(text, hi)
    if value == nil or value < 1 or math.floor(value) ~= value then
        return nil
    end
    return value
end

-- true when the comment carries the bare flag `name` or `name=1` ("gpuplan:ranks,min=1")
local function has_flag(comment, name)
    if not starts_with(comment, COMMENT_TAG) then
        return false
    end
    local body = string.sub(comment, #COMMENT_TAG + 1)
    for item in string.gmatch(body, "[^,;:]+") do
        if item == name or item == name .. "=1" then
            return true
        end
    end
    return false
end

-- "gpuplan:min=1,max=8;foo=bar" -> { min = "1", max = "8", foo = "bar" }
local function parse_options(comment)
    local opts = {}
    if not starts_with(comment, COMMENT_TAG) then
        return opts
    end
    local body = string.sub(comment, #COMMENT_TAG + 1)
    for key, value in string.gmatch(body, "([%w_]+)=([^,;]*)") do
        opts[key] = value
    end
    return opts
end

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

    -- Normalise the GPU request to nodes x GPUs per node.
    local explicit_nodes = job_desc.min_nodes ~= nil and job_desc.min_nodes ~= NO_VAL and
                           job_desc.min_nodes > 0
    local nodes = explicit_nodes and job_desc.min_nodes or 1
    local gtype, per_node = parse_gpu_tres(job_desc.tres_per_node)
    local total
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
                per_node = per_job / nodes
            end
        elseif per_job <= MAX_GPUS_PER_NODE then
            per_node = per_job
        elseif per_job % MAX_GPUS_PER_NODE == 0 then
            nodes = math.floor(per_job / MAX_GPUS_PER_NODE)
            per_node = MAX_GPUS_PER_NODE
        end
        if per_node ~= nil then
            job_desc.tres_per_node = gpu_tres(gtype, per_node)
            job_desc.tres_per_job = ""
            job_desc.min_nodes = nodes
            job_desc.max_nodes = nodes
        end
    end

    -- Elasticity from the comment; rigid when absent. Every user-given number is bounded.
    local opts = parse_options(job_desc.comment)
    if opts.run ~= nil and not OPERATOR_UIDS[submit_uid] then
        slurm.log_user("gpuplan: run= in the comment is reserved for gpuplan's own executor")
        return slurm.ERROR
    end
    if bounded_count(total, MAX_ENGINE_GPUS) == nil then
        slurm.log_user(string.format("gpuplan: GPU request %s must be in [1, %d]",
                                     tostring(total), MAX_ENGINE_GPUS))
        return slurm.ERROR
    end
    -- key = { check, upper bound, what the user is told }
    local bounds = {
        min = { bounded_count, MAX_ENGINE_GPUS, "a whole number in [1, %g]" },
        max = { bounded_count, MAX_ENGINE_GPUS, "a whole number in [1, %g]" },
        work = { bounded_number, MAX_WORK, "a number in (0, %g]" },
        duration = { bounded_number, MAX_DURATION_S, "a number in (0, %g]" },
        rate = { bounded_number, MAX_RATE, "a number in (0, %g]" },
    }
    for key, rule in pairs(bounds) do
        if opts[key] ~= nil and rule[1](opts[key], rule[2]) == nil then
            slurm.log_user(string.format("gpuplan: %s=%s must be " .. rule[3], key,
                                         string.sub(opts[key], 1, 20), rule[2]))
            return slurm.ERROR
        end
    end
    local min_gpus = tonumber(opts.min or "") or total
    local max_gpus = tonumber(opts.max or "") or total
    if min_gpus < 1 or max_gpus < min_gpus or total < min_gpus or total > max_gpus then
        slurm.log_user(string.format(
            "gpuplan: GPU request %d is outside the job's range min=%d max=%d", total, min_gpus,
            max_gpus))
        return slurm.ERROR
    end

    -- The request's shape: nodes, GPUs per node, whether the job starts its own ranks.
    local ntpn = job_desc.ntasks_per_node
    local ranks = has_flag(job_desc.comment, "ranks") or
                  (ntpn ~= nil and ntpn > 0 and ntpn < 65534)
    local shape = string.format(";nodes=%d", nodes)
    if per_node ~= nil then
        shape = shape .. string.format(";gpn=%d", per_node)
    end
    if ranks then
        shape = shape .. ";ranks=1"
    end

    -- Hold for the engine and leave the marker it polls for.
    job_desc.priority = 0
    job_desc.requeue = 1
    job_desc.admin_comment = string.format("%sheld;gpus=%d;min=%d;max=%d%s", MARK, total,
                                           min_gpus, max_gpus, shape)
    slurm.log_info("gpuplan: held job from uid %u: gpus=%d min=%d max=%d tres_per_node=%s",
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
