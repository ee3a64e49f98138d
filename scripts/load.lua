-- wrk script: POST /allocate with the body in $DAPI_LOAD_BODY (a JSON file).
-- Used by scripts/load.sh; see BENCHMARKS.md.
local path = os.getenv("DAPI_LOAD_BODY")
local file = assert(io.open(path, "rb"), "cannot open " .. tostring(path))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/json"
