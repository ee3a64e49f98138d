//! Bad input, everywhere: one row per malformed request, each sent to the real service over
//! HTTP. Every row must get its documented 4xx answer naming the field (or, for an invalid
//! server, the documented per-server filtering), never a 5xx or a dropped connection.

mod common;

use common::{example_request, send, start};
use serde_json::{json, Value};

/// What a row expects back.
enum Expect {
    /// 422 naming this field, with a message containing the text.
    Invalid(&'static str, &'static str),
    /// Another status whose `message` contains the text.
    Status(u16, &'static str),
    /// An allocation answer (200 or 409) where this server was filtered with this reason.
    Filtered(&'static str, &'static str),
}

type Change = fn(&mut Value);

/// A named bad request: how to spoil the example, and what must come back.
type Row = (&'static str, Box<dyn Fn(&mut Value)>, Expect);

fn set(path: &[&str], value: Value) -> impl Fn(&mut Value) {
    let path: Vec<String> = path.iter().map(|s| s.to_string()).collect();
    move |req: &mut Value| {
        let mut node = req;
        for key in &path[..path.len() - 1] {
            node = if let Ok(i) = key.parse::<usize>() { &mut node[i] } else { &mut node[key.as_str()] };
        }
        let last = &path[path.len() - 1];
        if value.is_null() && last.starts_with('-') {
            if let Some(obj) = node.as_object_mut() {
                obj.remove(&last[1..]);
            }
        } else if let Ok(i) = last.parse::<usize>() {
            node[i] = value.clone();
        } else {
            node[last.as_str()] = value.clone();
        }
    }
}

fn rule(key: &str, op: &str, value: &str, value_type: &str) -> Value {
    json!([{"key": key, "operator": op, "value": value, "valueType": value_type, "isSoft": false}])
}

const SERVER0: &str = "be55cce0-2645-41ce-b6c5-c0fc26062691";

fn rows() -> Vec<Row> {
    use Expect::*;
    let b = |f: Change| -> Box<dyn Fn(&mut Value)> { Box::new(f) };
    vec![
        // A key given twice, which JSON.parse reads as its last value: refused where dapi reads
        // the field (the body is rewritten by hand below), the message without serde_json's
        // position, which counted from the field's own text.
        (
            "server field repeated",
            b(|_| {}),
            Invalid("servers[0]", "cannot be read: duplicate field `memory_available_bytes`"),
        ),
        ("vm field repeated", b(|_| {}), Invalid("vm", "cannot be read: duplicate field `ram`")),
        // servers and their VMs
        (
            "servers missing",
            b(|r| drop(r.as_object_mut().map(|o| o.remove("servers")))),
            Invalid("servers", "not an array"),
        ),
        ("servers not an array", Box::new(set(&["servers"], json!({}))), Invalid("servers", "not an array")),
        // No candidate is no mistake: CNAPI ran the allocator on an empty list too.
        (
            "servers empty",
            Box::new(set(&["servers"], json!([]))),
            Status(409, "No compute resources available: received by DAPI"),
        ),
        ("server not an object", Box::new(set(&["servers", "1"], json!("x"))), Invalid("servers[1]", "not an object")),
        ("server null", Box::new(set(&["servers", "1"], Value::Null)), Invalid("servers[1]", "not an object")),
        (
            "duplicate server uuid",
            b(|r| r["servers"][1]["uuid"] = r["servers"][0]["uuid"].clone()),
            Invalid("servers[1].uuid", "duplicate"),
        ),
        ("100,000 servers", b(|r| r["servers"] = json!(vec![json!({}); 100_000])), Invalid("servers", "limit is")),
        (
            "server uuid not a uuid",
            Box::new(set(&["servers", "0", "uuid"], json!("NOT-A-UUID"))),
            Filtered("NOT-A-UUID", "does not match the regex pattern"),
        ),
        (
            "server memory a word",
            Box::new(set(&["servers", "0", "memory_total_bytes"], json!("lots"))),
            Filtered(SERVER0, "memory_total_bytes\": lots - string value found"),
        ),
        (
            "server memory negative",
            Box::new(set(&["servers", "0", "memory_total_bytes"], json!(-1))),
            Filtered(SERVER0, "must have a minimum value of 1"),
        ),
        (
            "server memory missing",
            Box::new(set(&["servers", "0", "-memory_total_bytes"], Value::Null)),
            Filtered(SERVER0, "is missing and it is required"),
        ),
        (
            "server reserved null",
            Box::new(set(&["servers", "0", "reserved"], Value::Null)),
            Filtered(SERVER0, "null - object value found, but a boolean is required"),
        ),
        (
            "server sysinfo a string",
            Box::new(set(&["servers", "0", "sysinfo"], json!("x"))),
            Filtered(SERVER0, "x - string value found, but a object is required"),
        ),
        (
            "server vms not an object",
            Box::new(set(&["servers", "0", "vms"], json!(5))),
            Filtered(SERVER0, "5 - number value found, but a object is required"),
        ),
        (
            "server VM without owner",
            b(|r| r["servers"][0]["vms"] = json!({"x": {"max_physical_memory": 1, "state": "running"}})),
            Filtered(SERVER0, "vms.x.owner_uuid\": is missing"),
        ),
        (
            "server VM negative RAM",
            b(
                |r| r["servers"][0]["vms"] = json!({"x": {"owner_uuid": "a3e2889c-795e-446b-9bd5-f6d2f09529af", "max_physical_memory": -5, "state": "running"}}),
            ),
            Filtered(SERVER0, "must have a minimum value of 1"),
        ),
        (
            "server ratio huge key",
            Box::new(set(&["servers", "0", "overprovision_ratios"], json!({"RAM": 1}))),
            Filtered(SERVER0, "overprovision_ratios.ram\": unsupported property"),
        ),
        (
            "server sysinfo null",
            Box::new(set(&["servers", "0", "sysinfo"], Value::Null)),
            Filtered(SERVER0, "property \"sysinfo\": null - null value found, but a object is required"),
        ),
        (
            "server sysinfo an array",
            Box::new(set(&["servers", "0", "sysinfo"], json!([]))),
            Filtered(SERVER0, "property \"sysinfo\":  - array value found, but a object is required"),
        ),
        (
            "server traits a number",
            Box::new(set(&["servers", "0", "traits"], json!(7))),
            Filtered(SERVER0, "7 - number value found"),
        ),
        // the VM payload
        (
            "vm missing",
            b(|r| drop(r.as_object_mut().map(|o| o.remove("vm")))),
            Invalid("vm", "was: [object Undefined]"),
        ),
        ("vm null", Box::new(set(&["vm"], Value::Null)), Invalid("vm", "was: [object Null]")),
        ("vm an array", Box::new(set(&["vm"], json!([]))), Invalid("vm", "was: [object Array]")),
        ("vm ram a string", Box::new(set(&["vm", "ram"], json!("64"))), Invalid("vm", "VM \"ram\" is not a number")),
        ("vm ram missing", Box::new(set(&["vm", "-ram"], Value::Null)), Invalid("vm", "VM \"ram\" is not a number")),
        (
            "vm ram negative",
            Box::new(set(&["vm", "ram"], json!(-64))),
            Invalid("vm", "VM \"ram\" must not be negative"),
        ),
        // Read as JSON.parse reads it (Infinity): a number, not negative, and it fits nowhere.
        (
            "vm ram beyond f64",
            Box::new(set(&["vm", "ram"], json!(123_456_789))),
            Status(409, "no servers with enough unreserved RAM"),
        ),
        (
            "vm owner not a uuid",
            Box::new(set(&["vm", "owner_uuid"], json!("bob"))),
            Invalid("vm", "\"owner_uuid\" is not a valid UUID"),
        ),
        (
            "vm_uuid missing",
            Box::new(set(&["vm", "-vm_uuid"], Value::Null)),
            Invalid("vm", "\"vm.vm_uuid\" is an invalid UUID"),
        ),
        (
            "vm quota a string",
            Box::new(set(&["vm", "quota"], json!("5"))),
            Invalid("vm", "VM \"quota\" is not a number"),
        ),
        (
            "vm cpu_cap a string",
            Box::new(set(&["vm", "cpu_cap"], json!("100"))),
            Invalid("vm", "VM \"cpu_cap\" is not a number"),
        ),
        (
            "vm brand missing",
            Box::new(set(&["vm", "-brand"], Value::Null)),
            Invalid("vm", "VM \"brand\" is not a string"),
        ),
        (
            "vm vcpus a string",
            Box::new(set(&["vm", "vcpus"], json!("2"))),
            Invalid("vm", "VM \"vcpus\" is not a number"),
        ),
        (
            "vm traits a string",
            Box::new(set(&["vm", "traits"], json!("ssd"))),
            Invalid("vm", "ssd - string value found, but a object is required"),
        ),
        (
            "vm internal_metadata a string",
            Box::new(set(&["vm", "internal_metadata"], json!("x"))),
            Invalid("vm", "\"vm.internal_metadata\" is not a hash"),
        ),
        (
            "volumesfrom not JSON",
            Box::new(set(&["vm", "internal_metadata"], json!({"docker:volumesfrom": "[oops"}))),
            Invalid("vm", "is not valid JSON"),
        ),
        (
            "volumesfrom not an array",
            Box::new(set(&["vm", "internal_metadata"], json!({"docker:volumesfrom": "{}"}))),
            Invalid("vm", "does not contain an array"),
        ),
        ("vm deeply nested", b(|_| {}), Invalid("vm", "recursion limit exceeded")),
        // affinity
        (
            "affinity not an array",
            Box::new(set(&["vm", "affinity"], json!({}))),
            Invalid("vm", "\"affinity\" is not an array"),
        ),
        (
            "affinity rule null",
            Box::new(set(&["vm", "affinity"], json!([null]))),
            Invalid("vm", "\"affinity.key\" is not a string"),
        ),
        (
            "affinity bad operator",
            b(|r| r["vm"]["affinity"] = rule("instance", "=~", "web", "exact")),
            Invalid("vm", "has invalid operator"),
        ),
        (
            "affinity bad valueType",
            b(|r| r["vm"]["affinity"] = rule("instance", "==", "web", "fuzzy")),
            Invalid("vm", "\"affinity.valueType\" has invalid value"),
        ),
        (
            "affinity isSoft a string",
            b(|r| {
                r["vm"]["affinity"] =
                    json!([{"key": "a", "operator": "==", "value": "b", "valueType": "exact", "isSoft": "no"}])
            }),
            Invalid("vm", "\"affinity.isSoft\" is not a boolean"),
        ),
        (
            "affinity invalid regex",
            b(|r| r["vm"]["affinity"] = rule("instance", "==", "/web(/", "re")),
            Invalid("vm", "is not a valid regular expression"),
        ),
        (
            "affinity invalid glob",
            b(|r| r["vm"]["affinity"] = rule("container", "==", "web(*", "glob")),
            Invalid("vm", "is not a valid regular expression"),
        ),
        (
            "affinity regex nothing to repeat",
            b(|r| r["vm"]["affinity"] = rule("role", "==", "/a**/", "re")),
            Invalid("vm", "is not a valid regular expression"),
        ),
        (
            "affinity regex octal escape",
            b(|r| r["vm"]["affinity"] = rule("role", "==", "/a\\01/", "re")),
            Invalid("vm", "is not a valid regular expression"),
        ),
        (
            "affinity regex unknown property",
            b(|r| r["vm"]["affinity"] = rule("role", "==", "/\\p{Klingon}/", "re")),
            Invalid("vm", "is not a valid regular expression"),
        ),
        (
            "affinity huge regex",
            b(|r| r["vm"]["affinity"] = rule("role", "==", "/(\\w{500}){500}/", "re")),
            Invalid("vm", "is too large"),
        ),
        // What CNAPI let through (it checks these only when truthy) and a plugin then asserted:
        // each row stops one `PluginError` of the production chain at validation.
        //   calculate-affinity "opts.affinity ([object]) is required":
        (
            "affinity null",
            Box::new(set(&["vm", "affinity"], Value::Null)),
            Invalid("vm", "VM \"affinity\" is not an array"),
        ),
        (
            "affinity empty string",
            Box::new(set(&["vm", "affinity"], json!(""))),
            Invalid("vm", "VM \"affinity\" is not an array"),
        ),
        (
            "affinity zero",
            Box::new(set(&["vm", "affinity"], json!(0))),
            Invalid("vm", "VM \"affinity\" is not an array"),
        ),
        (
            "affinity false",
            Box::new(set(&["vm", "affinity"], json!(false))),
            Invalid("vm", "VM \"affinity\" is not an array"),
        ),
        //   locality hints "opts.vm.locality (object) is required":
        (
            "locality empty string",
            Box::new(set(&["vm", "locality"], json!(""))),
            Invalid("vm", "VM \"locality\" is has wrong type"),
        ),
        (
            "locality zero",
            Box::new(set(&["vm", "locality"], json!(0))),
            Invalid("vm", "VM \"locality\" is has wrong type"),
        ),
        (
            "locality false",
            Box::new(set(&["vm", "locality"], json!(false))),
            Invalid("vm", "VM \"locality\" is has wrong type"),
        ),
        //   calculate-affinity and the locality hints "opts.vm.owner_uuid (uuid) is required":
        (
            "owner uuid in an array",
            Box::new(set(&["vm", "owner_uuid"], json!(["a3e2889c-795e-446b-9bd5-f6d2f09529af"]))),
            Invalid("vm", "VM \"owner_uuid\" is not a valid UUID"),
        ),
        //   locality hints "locality.near ([uuid]) is required" (from the request):
        (
            "locality near uuid in an array",
            Box::new(set(&["vm", "locality"], json!({"near": [["a3e2889c-795e-446b-9bd5-f6d2f09529af"]]}))),
            Invalid("vm", "VM \"locality.near\" contains an malformed UUID"),
        ),
        (
            "locality far an empty string (falsy: CNAPI let it through)",
            Box::new(set(&["vm", "locality"], json!({"far": ""}))),
            Invalid("vm", "VM \"locality.far\" is not a UUID"),
        ),
        //   ... and from affinity resolved to a server's VM keys: the server leaves at the validity step.
        (
            "server VM keyed by a name",
            b(|r| {
                r["servers"][0]["vms"] = json!({"web1": {"owner_uuid": r["vm"]["owner_uuid"].clone(), "alias": "web1",
                    "max_physical_memory": 64, "state": "running"}});
                r["vm"]["affinity"] = rule("instance", "!=", "web1", "exact");
            }),
            Filtered(SERVER0, "property \"vms.web1\": key is not a UUID"),
        ),
        //   hard-filter-platform-versions "<map> is not an object": the platform checks above
        //   ("image min_platform null", "package min_platform bad JSON") and this one:
        (
            "package min_platform JSON array",
            Box::new(set(&["package", "min_platform"], json!("[1]"))),
            Invalid("package", "\"package.min_platform\" is not a hash"),
        ),
        //   hard-filter-vlans "... is not an array" / "non-array group": "nic_tags not an array",
        //   "nic_tag_requirements flat", "top-level nic_tags not array" and:
        (
            "nic_tag_requirements null",
            Box::new(set(&["nic_tag_requirements"], Value::Null)),
            Invalid("nic_tag_requirements", "value was not an array"),
        ),
        // locality
        (
            "locality not an object",
            Box::new(set(&["vm", "locality"], json!("near"))),
            Invalid("vm", "\"locality\" is has wrong type"),
        ),
        (
            "locality near not a uuid",
            Box::new(set(&["vm", "locality"], json!({"near": "web"}))),
            Invalid("vm", "\"locality.near\" is not a UUID"),
        ),
        (
            "locality far bad element",
            Box::new(set(&["vm", "locality"], json!({"far": ["x"]}))),
            Invalid("vm", "\"locality.far\" contains an malformed UUID"),
        ),
        (
            "locality strict a string",
            Box::new(set(&["vm", "locality"], json!({"strict": "yes"}))),
            Invalid("vm", "\"locality.strict\" is given, but not boolean"),
        ),
        // nic tags
        (
            "nic_tags not an array",
            Box::new(set(&["vm", "nic_tags"], json!("external"))),
            Invalid("vm", "VM \"nic_tags\" is not an array"),
        ),
        (
            "nic_tags a number inside",
            Box::new(set(&["vm", "nic_tags"], json!(["a", 1]))),
            Invalid("vm", "contains invalid type in array"),
        ),
        (
            "nic_tag_requirements flat",
            Box::new(set(&["nic_tag_requirements"], json!(["a"]))),
            Invalid("nic_tag_requirements", "string value found, but a array is required"),
        ),
        (
            "nic_tag_requirements empty tag",
            Box::new(set(&["nic_tag_requirements"], json!([["a", ""]]))),
            Invalid("nic_tag_requirements", "must be at least 1 characters long"),
        ),
        (
            "top-level nic_tags not array",
            Box::new(set(&["nic_tags"], json!(5))),
            Invalid("nic_tags", "value was not an array"),
        ),
        // image and platforms
        (
            "image missing",
            b(|r| drop(r.as_object_mut().map(|o| o.remove("image")))),
            Invalid("image", "was: [object Undefined]"),
        ),
        ("image a string", Box::new(set(&["image"], json!("base-64"))), Invalid("image", "was: [object String]")),
        (
            "image_size a string",
            Box::new(set(&["image", "image_size"], json!("10"))),
            Invalid("image", "\"image.image_size\" has invalid type"),
        ),
        (
            "image_size empty",
            Box::new(set(&["image", "image_size"], json!(""))),
            Invalid("image", "\"image.image_size\" is not a number"),
        ),
        (
            "image_size negative",
            Box::new(set(&["image", "image_size"], json!(-1))),
            Invalid("image", "\"image.image_size\" must not be negative"),
        ),
        (
            "image min_ram a string",
            Box::new(set(&["image", "requirements"], json!({"min_ram": "512"}))),
            Invalid("image", "\"image.requirements.min_ram\" is not a number"),
        ),
        (
            "image min_ram negative",
            Box::new(set(&["image", "requirements"], json!({"min_ram": -512}))),
            Invalid("image", "\"image.requirements.min_ram\" must not be negative"),
        ),
        (
            "image max_ram an object",
            Box::new(set(&["image", "requirements"], json!({"max_ram": {}}))),
            Invalid("image", "\"image.requirements.max_ram\" is not a number"),
        ),
        (
            "image max_ram negative",
            Box::new(set(&["image", "requirements"], json!({"max_ram": -1}))),
            Invalid("image", "\"image.requirements.max_ram\" must not be negative"),
        ),
        (
            "image requirements an array",
            Box::new(set(&["image", "requirements"], json!([]))),
            Invalid("image", "\"image.requirements\" has invalid type"),
        ),
        (
            "image min_platform bad version",
            Box::new(set(&["image", "requirements"], json!({"min_platform": {"7": "20121211T203034Z"}}))),
            Invalid("image", "contains an invalid SDC version"),
        ),
        (
            "image max_platform bad date",
            Box::new(set(&["image", "requirements"], json!({"max_platform": {"7.0": "yesterday"}}))),
            Invalid("image", "contains an invalid platform date"),
        ),
        (
            "image min_platform null",
            Box::new(set(&["image", "requirements"], json!({"min_platform": null}))),
            Invalid("image", "is not a hash"),
        ),
        (
            "image traits a number",
            Box::new(set(&["image", "traits"], json!(3))),
            Invalid("image", "3 - number value found"),
        ),
        (
            "vm ram under image min_ram",
            b(|r| {
                r["image"]["requirements"] = json!({"min_ram": 4096});
            }),
            Invalid("vm", "is smaller than \"image.requirements.min_ram\""),
        ),
        // package
        ("package an array", Box::new(set(&["package"], json!([]))), Invalid("package", "was: [object Array]")),
        ("package null", Box::new(set(&["package"], Value::Null)), Invalid("package", "was: [object Null]")),
        (
            "package ratio a word",
            Box::new(set(&["package", "overprovision_cpu"], json!("lots"))),
            Invalid("package", "\"package.overprovision_cpu\" has invalid type"),
        ),
        (
            "package spread unknown",
            Box::new(set(&["package", "alloc_server_spread"], json!("sideways"))),
            Invalid("package", "\"alloc_server_spread\" has invalid value"),
        ),
        (
            "package min_platform bad JSON",
            Box::new(set(&["package", "min_platform"], json!("{oops"))),
            Invalid("package", "\"package.min_platform\" has invalid type"),
        ),
        (
            "package min_platform bad version",
            Box::new(set(&["package", "min_platform"], json!({"x": "20121211T203034Z"}))),
            Invalid("package", "contains an invalid SDC version"),
        ),
        (
            "package traits a number",
            Box::new(set(&["package", "traits"], json!(5))),
            Invalid("package", "\"package.traits\": property \"\": 5 - number value found"),
        ),
        // tickets
        ("tickets not an array", Box::new(set(&["tickets"], json!({}))), Invalid("tickets", "value was not an array")),
        (
            "ticket not an object",
            Box::new(set(&["tickets"], json!([5]))),
            Invalid("tickets", "\"ticket\" has invalid type"),
        ),
        (
            "ticket id not a uuid",
            Box::new(set(
                &["tickets"],
                json!([{"id": "x", "server_uuid": SERVER0, "scope": "vm", "action": "provision", "status": "active"}]),
            )),
            Invalid("tickets", "ticket uuid \"x\" - \"id\" is not a valid UUID"),
        ),
        (
            "ticket scope a number",
            Box::new(set(
                &["tickets"],
                json!([{"id": SERVER0, "server_uuid": SERVER0, "scope": 1, "action": "provision", "status": "active"}]),
            )),
            Invalid("tickets", "\"scope\" is not a string"),
        ),
        // the body itself
        ("seed negative", Box::new(set(&["seed"], json!(-1))), Invalid("seed", "non-negative integer")),
        ("seed with a fraction", Box::new(set(&["seed"], json!(7.5))), Invalid("seed", "non-negative integer")),
        ("body not an object", b(|r| *r = json!([1, 2])), Status(400, "not a JSON object")),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_gets_its_documented_answer() {
    let s = start(&[]).await;
    let mut failures = Vec::new();
    for (name, change, expect) in rows() {
        let mut req = example_request();
        change(&mut req);
        let mut body = serde_json::to_vec(&req).expect("serialise");
        match name {
            // Numbers JSON can carry but f64 cannot, and nesting past any sane depth, are
            // written by hand: serde_json would refuse to produce them.
            "vm ram beyond f64" => {
                let text = String::from_utf8_lossy(&body).replacen(":123456789", ":1e400", 1);
                body = text.into_bytes();
            }
            "server field repeated" => {
                let text = String::from_utf8_lossy(&body).replacen(
                    "\"memory_available_bytes\":",
                    "\"memory_available_bytes\":1,\"memory_available_bytes\":",
                    1,
                );
                body = text.into_bytes();
            }
            "vm field repeated" => {
                body = String::from_utf8_lossy(&body).replacen("\"vm\":{", "\"vm\":{\"ram\":1,", 1).into_bytes();
            }
            "vm deeply nested" => {
                let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
                body = format!(r#"{{"servers": [], "vm": {{"tags": {deep}}}, "image": {{}}}}"#).into_bytes();
            }
            _ => {}
        }
        let r = send(s.addr, "POST", "/allocate", &[("Content-Type", "application/json")], &body).await;
        let answer: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        let ok = match &expect {
            Expect::Invalid(field, text) => {
                r.status == 422
                    && answer["errors"][0]["field"] == *field
                    && answer["errors"][0]["message"]
                        .as_str()
                        .is_some_and(|m| m.contains(text) && !m.contains(" at line "))
            }
            Expect::Status(status, text) => {
                r.status == *status && answer["message"].as_str().is_some_and(|m| m.contains(text))
            }
            Expect::Filtered(server, text) => {
                (r.status == 200 || r.status == 409)
                    && answer["steps"].as_array().is_some_and(|steps| {
                        steps.iter().any(|st| {
                            st["step"] == "Servers objects which are valid"
                                && st["reasons"][*server].as_str().is_some_and(|m| m.contains(text))
                        })
                    })
            }
        };
        if !ok {
            failures.push(format!(
                "{name}: got {} {}",
                r.status,
                String::from_utf8_lossy(&r.body).chars().take(300).collect::<String>()
            ));
        }
    }
    assert!(failures.is_empty(), "{} rows failed:\n{}", failures.len(), failures.join("\n"));
}
