// The original allocator as one whole process, for scripts/vs-original.py:
//   node original-runner.js PATH/TO/lib/allocator.js CONFIG BODY
// reads CONFIG ({allocationDescription, defaults}) and BODY (a POST /allocate body), runs
// Allocator#allocate once and prints {server, steps} as JSON, as `dapi allocate` does.
'use strict';
var fs = require('fs');

var Allocator = require(process.argv[2]);
var config = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
var body = JSON.parse(fs.readFileSync(process.argv[4], 'utf8'));

function quiet() {}
var log = { trace: quiet, debug: quiet, info: quiet, warn: quiet, error: quiet };
log.child = function () { return log; };

var allocator = new Allocator({ log: log }, config.allocationDescription, config.defaults);
allocator.allocate(body.servers, body.vm, body.image, body.package, body.tickets || [],
    function (err, server, steps) {
	if (err) {
		console.error(err);
		process.exit(1);
	}
	process.stdout.write(JSON.stringify({ server: server || null, steps: steps }));
});
