#!/usr/bin/env node
/*
 * Do refusals reach real Node clients? Starts `dapi serve` on loopback with a small
 * concurrency limit, sends concurrent multi-megabyte POST /allocate bodies the way CNAPI
 * does (Node's http keep-alive agent, and restify-clients' JsonClient when installed),
 * and counts per client kind how many requests saw a clean answer (200/409, or a 503 with
 * Retry-After) and how many saw a socket error instead. Each run is a child process, so a
 * client that crashes Node on an unhandled socket error is counted as a crash.
 *
 *   node scripts/overload-clients.js [--binary target/release/dapi] [--runs 5]
 *        [--clients 32] [--mb 5] [--limit 4] [--kinds http,restify]
 *
 * restify-clients is optional: `npm install --prefix scripts` (scripts/package.json), or
 * point NODE_PATH at a directory holding it. Loopback only; bounded in time.
 */
'use strict';

var child_process = require('child_process');
var fs = require('fs');
var http = require('http');
var path = require('path');

var ROOT = path.dirname(__dirname);

function parseArgs(argv) {
    var opts = {
        binary: path.join(ROOT, 'target/release/dapi'),
        runs: 5,
        clients: 32,
        mb: 5,
        limit: 4,
        kinds: 'http,restify',
        child: null,
        url: null
    };
    for (var i = 0; i < argv.length; i += 2) {
        var key = argv[i].replace(/^--/, '');
        if (!(key in opts)) {
            throw new Error('unknown option ' + argv[i]);
        }
        opts[key] = typeof opts[key] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
    }
    return opts;
}

/* A valid allocation request of about `mb` megabytes: the example's servers, repeated
 * under fresh uuids. */
function bigBody(mb) {
    var example = JSON.parse(fs.readFileSync(path.join(ROOT, 'examples/allocate.json'), 'utf8'));
    var servers = [];
    var size = 0;
    for (var n = 0; size < mb * 1024 * 1024; n++) {
        var s = JSON.parse(JSON.stringify(example.servers[n % example.servers.length]));
        var hex = ('00000000' + n.toString(16)).slice(-8);
        s.uuid = hex + '-0000-4000-8000-' + ('000000000000' + n.toString(16)).slice(-12);
        s.hostname = 'cn' + n;
        servers.push(s);
        size += JSON.stringify(s).length;
    }
    example.servers = servers;
    return example;
}

/* One client kind, `clients` requests at once; prints a JSON tally. */
function runChild(opts) {
    var body = bigBody(opts.mb);
    var text = JSON.stringify(body);
    var tally = { clean503: 0, answered: 0, other: 0, socketErrors: 0, errors: {} };
    var pending = opts.clients;
    var url = new URL(opts.url);

    function done(kind, detail) {
        if (kind === 'error') {
            tally.socketErrors++;
            tally.errors[detail] = (tally.errors[detail] || 0) + 1;
        } else {
            tally[kind]++;
        }
        if (--pending === 0) {
            process.stdout.write(JSON.stringify(tally) + '\n');
            process.exit(0);
        }
    }

    function judge(status, headers) {
        if (status === 503 && headers['retry-after']) {
            return 'clean503';
        }
        return status === 200 || status === 409 ? 'answered' : 'other';
    }

    var send;
    if (opts.child === 'http') {
        // CNAPI's own agent settings: keep-alive, no socket limit.
        var agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
        send = function () {
            var req = http.request({
                host: url.hostname, port: url.port, path: '/allocate', method: 'POST', agent: agent,
                headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) }
            }, function (res) {
                res.resume();
                res.on('end', function () { done(judge(res.statusCode, res.headers)); });
                res.on('error', function (e) { done('error', e.code || e.message); });
            });
            req.on('error', function (e) { done('error', e.code || e.message); });
            req.end(text);
        };
    } else {
        var restify = require('restify-clients');
        var client = restify.createJsonClient({ url: opts.url, retry: false });
        send = function () {
            client.post('/allocate', body, function (err, req, res) {
                if (res && res.statusCode) {
                    done(judge(res.statusCode, res.headers));
                } else {
                    done('error', (err && (err.code || err.name)) || 'unknown');
                }
            });
        };
    }
    for (var i = 0; i < opts.clients; i++) {
        send();
    }
    // Bounded: a run that hangs is reported as such.
    setTimeout(function () {
        process.stdout.write(JSON.stringify({ hung: pending, tally: tally }) + '\n');
        process.exit(3);
    }, 60000).unref();
}

function waitForLine(proc, re, ms, cb) {
    var buf = '';
    var timer = setTimeout(function () { cb(new Error('dapi did not start')); }, ms);
    proc.stdout.on('data', function onData(chunk) {
        buf += chunk;
        var m = buf.match(re);
        if (m) {
            clearTimeout(timer);
            proc.stdout.removeListener('data', onData);
            proc.stdout.resume();
            cb(null, m);
        }
    });
}

function main() {
    var opts = parseArgs(process.argv.slice(2));
    if (opts.child) {
        return runChild(opts);
    }
    var env = Object.assign({}, process.env, {
        DAPI_LISTEN: '127.0.0.1:0',
        // info: the "dapi listening" line gives the port.
        DAPI_LOG_LEVEL: 'info',
        DAPI_LIMITS__MAX_CONCURRENT_ALLOCATIONS: String(opts.limit)
    });
    delete env.DAPI_CONFIG;
    var dapi = child_process.spawn(opts.binary, ['serve'], { env: env, stdio: ['ignore', 'pipe', 'inherit'] });
    waitForLine(dapi, /"addr":"([^"]+)"/, 20000, function (err, m) {
        if (err) {
            dapi.kill();
            throw err;
        }
        var url = 'http://' + m[1];
        var kinds = opts.kinds.split(',').filter(function (kind) {
            if (kind !== 'restify') {
                return true;
            }
            try {
                require.resolve('restify-clients');
                return true;
            } catch (e) {
                process.stderr.write('restify-clients is not installed: skipping it (npm install --prefix scripts)\n');
                return false;
            }
        });
        var results = {};
        var jobs = [];
        kinds.forEach(function (kind) {
            results[kind] = { runs: 0, crashed: 0, hung: 0, clean503: 0, answered: 0, other: 0, socketErrors: 0, errors: {} };
            for (var r = 0; r < opts.runs; r++) {
                jobs.push(kind);
            }
        });
        (function next() {
            var kind = jobs.shift();
            if (!kind) {
                dapi.kill('SIGTERM');
                process.stdout.write(JSON.stringify({ binary: opts.binary, clients: opts.clients, mb: opts.mb,
                    limit: opts.limit, results: results }, null, 1) + '\n');
                return;
            }
            var out = child_process.spawnSync(process.execPath, [__filename, '--child', kind, '--url', url,
                '--clients', String(opts.clients), '--mb', String(opts.mb)], { encoding: 'utf8', timeout: 90000 });
            var res = results[kind];
            res.runs++;
            var line = (out.stdout || '').trim().split('\n').pop();
            var tally;
            try {
                tally = JSON.parse(line);
            } catch (e) {
                tally = null;
            }
            if (out.status === 0 && tally) {
                ['clean503', 'answered', 'other', 'socketErrors'].forEach(function (k) { res[k] += tally[k]; });
                Object.keys(tally.errors).forEach(function (k) { res.errors[k] = (res.errors[k] || 0) + tally.errors[k]; });
            } else if (out.status === 3) {
                res.hung++;
            } else {
                res.crashed++;
                var why = (out.stderr || '').split('\n').filter(function (l) { return /Error|E[A-Z]{4,}/.test(l); })[0];
                var key = 'crash: ' + (why || 'status ' + out.status).trim().slice(0, 80);
                res.errors[key] = (res.errors[key] || 0) + 1;
            }
            // Let the service finish the admitted allocations before the next burst.
            setTimeout(next, 1500);
        })();
    });
}

main();
