//! Affinity rules → locality hints (used by `calculate-affinity`).
//!
//! An affinity (`instance==web1`, `role!=db`, `container==~/^lb/`) names VMs of the owner;
//! locality hints only speak uuids. Each affinity is resolved to the uuids of the owner's
//! VMs it names, `==` ones going to `near` and `!=` ones to `far`:
//!
//! * Hard and soft affinities cannot be mixed in one locality, so when both occur the soft
//!   ones are dropped; the locality is strict when any hard affinity exists.
//! * Affinities are processed in order; `image` affinities are ignored (every image is on
//!   every server). A strict `==` that names no VM fails the whole conversion
//!   (`no active containers found matching ...`); any other affinity naming nothing is
//!   dropped.
//! * Tag affinities (`KEY op VALUE`) match the owner's active VMs whose tag `KEY` or
//!   `docker:label:KEY` matches (exact and glob: the look-up's `*` globbing; `re`: the regex).
//! * Instance affinities (`instance`/`container`): a lowercase uuid is taken as is, unchecked;
//!   a 64-hex value is a full Docker id (the VM whose uuid is its first 32 digits, if it is
//!   the owner's, active, a Docker VM with exactly that id); anything else is looked up by
//!   alias (glob), then in the owner's full active listing (fetched once per request): a
//!   regex on the alias (`re`), the glob turned into an anchored regex (`glob`), or the first
//!   exact alias, else a unique Docker-id prefix (`exact`; several prefixes is the error
//!   `Multiple matches: VALUE=[...]`).
//!
//! A regex is the affinity's value with its first and last characters removed, in XRegExp's
//! dialect (an instance glob becomes a native RegExp), compiled by [`crate::js::regex`] with
//! tight size and backtracking limits. A value that does not compile (which threw in the
//! original) is reported as an affinity error, never a panic, and so is a match past the
//! backtracking limit (where the original would have hung). So is a `null` tag value met by a regex affinity (the
//! original threw reading it).

use crate::engine::vm_index::{ListQuery, Predicate, VmLookup};
use crate::js::regex::{self, Dialect, JsRegex, TooManySteps};
use crate::js::{strict_eq, Js, JsObject};
pub use crate::model::affinity::Affinity;

/// The locality derived from affinities.
#[derive(Debug, Clone, PartialEq)]
pub struct DerivedLocality {
    pub strict: bool,
    pub near: Vec<String>,
    pub far: Vec<String>,
}

impl DerivedLocality {
    /// `{strict, near?, far?}`, empty lists left out.
    pub fn to_js(&self) -> Js {
        let mut obj = JsObject::new();
        obj.insert("strict".into(), Js::Bool(self.strict));
        let list = |l: &[String]| Js::Arr(l.iter().map(|u| Js::str(u)).collect());
        if !self.near.is_empty() {
            obj.insert("near".into(), list(&self.near));
        }
        if !self.far.is_empty() {
            obj.insert("far".into(), list(&self.far));
        }
        Js::obj(obj)
    }
}

/// Converts affinities to a locality: `Ok(None)` when none results, `Err` with the message
/// for the step's `*` reason.
pub fn locality_from_affinity(
    affinities: &[Affinity],
    owner: &str,
    index: VmLookup<'_, '_>,
) -> Result<Option<DerivedLocality>, String> {
    let have_hard = affinities.iter().any(|a| !a.is_soft);
    let have_soft = affinities.iter().any(|a| a.is_soft);
    let strict = have_hard;
    let mut resolver = Resolver { owner, index, all_active: None };
    let (mut near, mut far) = (Vec::new(), Vec::new());
    // With both kinds present only the hard ones count.
    for aff in affinities.iter().filter(|a| !(have_hard && have_soft && a.is_soft)) {
        if aff.key == "image" {
            continue;
        }
        let uuids = resolver.resolve(aff)?;
        if !uuids.is_empty() {
            if aff.operator == "==" {
                near.extend(uuids);
            } else {
                far.extend(uuids);
            }
        } else if strict && aff.operator != "!=" {
            return Err(if aff.is_instance() {
                format!("no active containers found matching \"{}\" for affinity \"{}\"", aff.value, aff.expr())
            } else {
                format!(
                    "no active containers found matching tag \"{}={}\" for affinity \"{}\"",
                    aff.key,
                    aff.value,
                    aff.expr()
                )
            });
        }
    }
    if near.is_empty() && far.is_empty() {
        return Ok(None);
    }
    Ok(Some(DerivedLocality { strict, near, far }))
}

/// Resolves affinities to VM uuids for one request, remembering the owner's full listing.
struct Resolver<'a, 'v> {
    owner: &'a str,
    index: VmLookup<'a, 'v>,
    all_active: Option<Vec<Js>>,
}

const ALL_ACTIVE_FIELDS: &[&str] = &["uuid", "alias", "internal_metadata", "docker"];

/// `ListVms` as VMAPI would answer it: VMAPI knows VMs by uuid, so a VM sent under another
/// key (its server leaves at the validity step) is not listed and cannot become a
/// locality hint.
fn listed(index: VmLookup<'_, '_>, q: &ListQuery<'_>) -> Vec<Js> {
    let mut vms = index.list(q);
    vms.retain(|vm| vm.get("uuid").as_str().is_some_and(super::locality::is_uuid));
    vms
}

fn uuids_of(vms: &[Js]) -> Vec<String> {
    vms.iter().map(|vm| vm.get("uuid").to_js_string()).collect()
}

impl Resolver<'_, '_> {
    fn resolve(&mut self, aff: &Affinity) -> Result<Vec<String>, String> {
        if !aff.is_instance() {
            return if aff.value_type == "re" { self.by_tag_regex(aff) } else { Ok(self.by_tag_glob(aff, &aff.value)) };
        }
        if is_lower_uuid(&aff.value) {
            return Ok(vec![aff.value.clone()]);
        }
        if is_docker_id(&aff.value) {
            return Ok(self.by_docker_id(aff));
        }
        self.by_name(aff)
    }

    fn tag_query(&self, aff: &Affinity, value: &str) -> Vec<Js> {
        let predicate = Predicate::Or(vec![
            Predicate::eq(format!("tag.{}", aff.key), value),
            Predicate::eq(format!("tag.docker:label:{}", aff.key), value),
        ]);
        let q = ListQuery {
            owner: self.owner,
            active: true,
            predicate: Some(predicate),
            fields: &["uuid", "alias", "tags"],
        };
        listed(self.index, &q)
    }

    fn by_tag_glob(&self, aff: &Affinity, value: &str) -> Vec<String> {
        uuids_of(&self.tag_query(aff, value))
    }

    fn by_tag_regex(&self, aff: &Affinity) -> Result<Vec<String>, String> {
        let tagged = self.tag_query(aff, "*");
        let re = compile(aff, &aff.regex_source(), Dialect::XRegExp)?;
        let label_key = format!("docker:label:{}", aff.key);
        let mut uuids = Vec::new();
        for vm in &tagged {
            let tags = vm.get("tags");
            let tag = tags.get(&aff.key);
            if matches!(tag, Js::Null) {
                return Err(format!(
                    "cannot match affinity \"{}\": tag \"{}\" of VM {} is null",
                    aff.expr(),
                    aff.key,
                    vm.get("uuid").to_js_string()
                ));
            }
            let label = tags.get(&label_key);
            let hit = |v: &Js| Ok::<_, TooManySteps>(!v.is_undefined() && re.is_match(&v.to_js_string())?);
            if hit(tag).map_err(|_| too_many_steps(aff))? || hit(label).map_err(|_| too_many_steps(aff))? {
                uuids.push(vm.get("uuid").to_js_string());
            }
        }
        Ok(uuids)
    }

    /// The VM a full Docker id names, if it is the owner's active Docker VM with that id.
    fn by_docker_id(&self, aff: &Affinity) -> Vec<String> {
        let v = &aff.value;
        let uuid = format!("{}-{}-{}-{}-{}", &v[0..8], &v[8..12], &v[12..16], &v[16..20], &v[20..32]);
        let Ok(vm) = self.index.get(&uuid, Some(self.owner)) else { return Vec::new() };
        let same_id = strict_eq(vm.internal_metadata().get("docker:id"), &Js::str(v));
        if vm.docker().truthy() && vm.is_active() && same_id {
            vec![uuid]
        } else {
            Vec::new()
        }
    }

    fn by_name(&mut self, aff: &Affinity) -> Result<Vec<String>, String> {
        if aff.value_type == "exact" || aff.value_type == "glob" {
            let q = ListQuery {
                owner: self.owner,
                active: true,
                predicate: Some(Predicate::eq("alias", aff.value.as_str())),
                fields: &["uuid", "alias"],
            };
            let found = listed(self.index, &q);
            if !found.is_empty() {
                return Ok(uuids_of(&found));
            }
        }
        self.full_search(aff).map(|vms| uuids_of(&vms))
    }

    /// The owner's active VMs, listed once per request.
    fn all_active(&mut self) -> &[Js] {
        let (owner, index) = (self.owner, self.index);
        self.all_active.get_or_insert_with(|| {
            listed(index, &ListQuery { owner, active: true, predicate: None, fields: ALL_ACTIVE_FIELDS })
        })
    }

    fn full_search(&mut self, aff: &Affinity) -> Result<Vec<Js>, String> {
        match aff.value_type.as_str() {
            "re" | "glob" => {
                let re = match aff.value_type.as_str() {
                    "re" => compile(aff, &aff.regex_source(), Dialect::XRegExp)?,
                    _ => compile(aff, &aff.glob_source(), Dialect::Native)?,
                };
                let mut found = Vec::new();
                for vm in self.all_active() {
                    if alias_matches(vm, &re).map_err(|_| too_many_steps(aff))? {
                        found.push(vm.clone());
                    }
                }
                Ok(found)
            }
            "exact" => {
                let value = Js::str(&aff.value);
                let mut prefixed = Vec::new();
                for vm in self.all_active() {
                    let alias = vm.get("alias");
                    if alias.truthy() && strict_eq(alias, &value) {
                        return Ok(vec![vm.clone()]);
                    }
                    let id = vm.get("internal_metadata").get("docker:id");
                    if vm.get("docker").truthy() && id.as_str().is_some_and(|id| id.starts_with(&aff.value)) {
                        prefixed.push(vm.clone());
                    }
                }
                if prefixed.len() > 1 {
                    return Err(format!("Multiple matches: {}={}", aff.value, Js::Arr(prefixed).stringify()));
                }
                Ok(prefixed)
            }
            other => Err(format!("Unknown affinity valueType: {other}")),
        }
    }
}

fn alias_matches(vm: &Js, re: &JsRegex) -> Result<bool, TooManySteps> {
    let alias = vm.get("alias");
    Ok(alias.truthy() && re.is_match(&alias.to_js_string())?)
}

/// A match past the backtracking limit (where the original would have hung).
fn too_many_steps(aff: &Affinity) -> String {
    format!("Regular expression in affinity \"{}\" needs too many steps to match", aff.expr())
}

/// A full lowercase uuid (`instance==<uuid>` is used without any look-up).
fn is_lower_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => matches!(c, b'0'..=b'9' | b'a'..=b'f'),
        })
}

/// A full Docker id: 64 lowercase hex digits.
fn is_docker_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// Compiles an affinity's regex in the original's dialect; failure is the affinity's error.
fn compile(aff: &Affinity, source: &str, dialect: Dialect) -> Result<JsRegex, String> {
    regex::compile(source, dialect)
        .map_err(|_| format!("Invalid regular expression: /{source}/ in affinity \"{}\"", aff.expr()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::vm_index::VmIndex;
    use crate::model::Server;
    use serde_json::json;

    const OWNER: &str = "b20ae67c-48d9-11e9-bef6-17de1751b73a";
    const OTHER: &str = "00000000-0000-0000-0000-0000000000cc";
    const WEB3: &str = "fb02171e-4970-11e9-b315-7f49301411e7";
    const DB1: &str = "0c7f7e3a-0000-4000-8000-000000000001";
    const DOCKER_ID: &str = "97ed62d4dc30d1f53b903dac1e90c8fee4a77a30f0099b42f34f67cb5b17019c";
    const DOCKER_UUID: &str = "97ed62d4-dc30-d1f5-3b90-3dac1e90c8fe";

    /// One server with these VMs, and its index.
    struct Indexed {
        servers: Vec<Server<'static>>,
        index: VmIndex,
    }

    fn index(vms: serde_json::Value) -> Indexed {
        let servers: Vec<Server> = crate::model::from_test_json(&json!([{"uuid": "s1", "vms": vms}]));
        let index = VmIndex::build(&servers);
        Indexed { servers, index }
    }

    fn aff(key: &str, op: &str, value: &str, vt: &str, soft: bool) -> Affinity {
        Affinity { key: key.into(), operator: op.into(), value: value.into(), value_type: vt.into(), is_soft: soft }
    }

    fn run(idx: &Indexed, affs: &[Affinity]) -> Result<Option<Js>, String> {
        locality_from_affinity(affs, OWNER, idx.index.on(&idx.servers)).map(|l| l.map(|l| l.to_js()))
    }

    fn loc(text: &str) -> Result<Option<Js>, String> {
        Ok(Some(serde_json::from_str(text).expect("locality")))
    }

    #[test]
    fn vms_not_keyed_by_uuid_are_never_hints() {
        let idx =
            index(json!({"web1": {"owner_uuid": OWNER, "alias": "web1", "state": "running", "tags": {"role": "web"}}}));
        assert_eq!(run(&idx, &[aff("instance", "!=", "web1", "exact", false)]), Ok(None));
        assert_eq!(run(&idx, &[aff("role", "!=", "web", "exact", false)]), Ok(None));
        assert_eq!(run(&idx, &[aff("role", "!=", "/w/", "re", false)]), Ok(None));
        assert!(run(&idx, &[aff("instance", "==", "web*", "glob", false)]).is_err());
    }

    #[test]
    fn no_affinities_no_locality() {
        assert_eq!(run(&index(json!({})), &[]), Ok(None));
    }

    #[test]
    fn alias_lookup_gives_far_or_near() {
        let idx = index(json!({WEB3: {"owner_uuid": OWNER, "alias": "webhead3", "state": "running"}}));
        let far = run(&idx, &[aff("instance", "!=", "webhead3", "exact", false)]);
        assert_eq!(far, loc(&format!(r#"{{"strict": true, "far": ["{WEB3}"]}}"#)));
        let near = run(&idx, &[aff("container", "==", "webhead3", "exact", true)]);
        assert_eq!(near, loc(&format!(r#"{{"strict": false, "near": ["{WEB3}"]}}"#)));
        assert_eq!(near.expect("ok").expect("some").stringify(), format!(r#"{{"strict":false,"near":["{WEB3}"]}}"#));
    }

    #[test]
    fn docker_id_prefix_when_no_alias_matches() {
        let vm = |id: &str| json!({"owner_uuid": OWNER, "docker": true, "internal_metadata": {"docker:id": id}});
        let idx = index(json!({WEB3: vm("webhead3abc")}));
        assert_eq!(
            run(&idx, &[aff("instance", "!=", "webhead3", "exact", false)]),
            loc(&format!(r#"{{"strict": true, "far": ["{WEB3}"]}}"#))
        );
        // Not a docker VM, or another id: nothing, and a `!=` is simply dropped.
        let idx = index(json!({WEB3: {"owner_uuid": OWNER, "docker": false,
                                        "internal_metadata": {"docker:id": "webhead3"}}}));
        assert_eq!(run(&idx, &[aff("instance", "!=", "webhead3", "exact", false)]), Ok(None));
    }

    #[test]
    fn docker_id_prefixes_must_be_unambiguous() {
        let d = |id: &str, alias: &str| json!({"owner_uuid": OWNER, "alias": alias, "docker": true, "internal_metadata": {"docker:id": id}});
        // No alias is "1", and both Docker ids start with it: ambiguous.
        let idx = index(json!({WEB3: d("1aaa", "lb1"), DB1: d("1bbb", "twin")}));
        let err = run(&idx, &[aff("container", "!=", "1", "exact", false)]).expect_err("ambiguous");
        assert_eq!(
            err,
            format!(
                r#"Multiple matches: 1=[{{"uuid":"{WEB3}","alias":"lb1","internal_metadata":{{"docker:id":"1aaa"}},"docker":true}},{{"uuid":"{DB1}","alias":"twin","internal_metadata":{{"docker:id":"1bbb"}},"docker":true}}]"#
            )
        );
        // A single prefix match is used.
        let idx = index(json!({WEB3: d("1aaa", "lb1"), DB1: d("2bbb", "twin")}));
        assert_eq!(
            run(&idx, &[aff("container", "==", "1", "exact", false)]),
            loc(&format!(r#"{{"strict": true, "near": ["{WEB3}"]}}"#))
        );
    }

    #[test]
    fn strict_near_naming_nothing_fails() {
        let idx = index(json!({}));
        assert_eq!(
            run(&idx, &[aff("instance", "==", "webhead3", "exact", false)]),
            Err(r#"no active containers found matching "webhead3" for affinity "instance==webhead3""#.into())
        );
        assert_eq!(
            run(&idx, &[aff("foo", "==", "bar", "exact", false)]),
            Err(r#"no active containers found matching tag "foo=bar" for affinity "foo==bar""#.into())
        );
        // Soft, or `!=`: dropped instead.
        assert_eq!(run(&idx, &[aff("foo", "==", "bar", "exact", true)]), Ok(None));
        assert_eq!(run(&idx, &[aff("foo", "!=", "bar", "exact", false)]), Ok(None));
    }

    #[test]
    fn regex_and_glob_on_aliases() {
        let idx = index(json!({WEB3: {"owner_uuid": OWNER, "alias": "webhead3"},
                               DB1: {"owner_uuid": OWNER, "alias": "ebhead3"}}));
        // The first and last characters are stripped whatever they are.
        let near = |v: &str, vt: &str| run(&idx, &[aff("instance", "==", v, vt, false)]);
        assert_eq!(near("/web/", "re"), loc(&format!(r#"{{"strict": true, "near": ["{WEB3}"]}}"#)));
        assert_eq!(near("xwebx", "re"), loc(&format!(r#"{{"strict": true, "near": ["{WEB3}"]}}"#)));
        assert_eq!(
            near("/^web/", "re").map(|_| ()).and(near("/zz/", "re")),
            Err(r#"no active containers found matching "/zz/" for affinity "instance==/zz/""#.into())
        );
        assert_eq!(near("*eb*", "glob"), loc(&format!(r#"{{"strict": true, "near": ["{WEB3}", "{DB1}"]}}"#)));
        assert_eq!(near("w*", "glob"), loc(&format!(r#"{{"strict": true, "near": ["{WEB3}"]}}"#)));
    }

    #[test]
    fn glob_fallback_keeps_regex_metacharacters() {
        // The alias look-up (only `*` special) misses "web.ead3", the regex fallback hits.
        let idx = index(json!({WEB3: {"owner_uuid": OWNER, "alias": "webhead3"}}));
        assert_eq!(
            run(&idx, &[aff("instance", "==", "web.ead*", "glob", false)]),
            loc(&format!(r#"{{"strict": true, "near": ["{WEB3}"]}}"#))
        );
        let err = run(&idx, &[aff("instance", "==", "web(*", "glob", false)]).expect_err("bad glob");
        assert!(err.starts_with("Invalid regular expression: /^web(.*$/"), "{err}");
        let err = run(&idx, &[aff("instance", "==", "/web(/", "re", false)]).expect_err("bad re");
        assert!(err.contains("instance==/web(/"), "{err}");
    }

    #[test]
    fn tags_and_docker_labels() {
        let idx = index(json!({
            WEB3: {"owner_uuid": OWNER, "tags": {"role": "web", "shard": 2}},
            DB1: {"owner_uuid": OWNER, "tags": {"docker:label:role": "webby"}},
            "aaaaaaaa-0000-4000-8000-000000000009": {"owner_uuid": OTHER, "tags": {"role": "web"}},
            "aaaaaaaa-0000-4000-8000-00000000000a": {"owner_uuid": OWNER, "state": "failed", "tags": {"role": "web"}}
        }));
        let one = |a: Affinity| run(&idx, &[a]);
        assert_eq!(
            one(aff("role", "==", "web", "exact", false)),
            loc(&format!(r#"{{"strict": true, "near": ["{WEB3}"]}}"#))
        );
        assert_eq!(
            one(aff("role", "!=", "web*", "glob", false)),
            loc(&format!(r#"{{"strict": true, "far": ["{WEB3}", "{DB1}"]}}"#))
        );
        assert_eq!(
            one(aff("role", "==", "/by$/", "re", true)),
            loc(&format!(r#"{{"strict": false, "near": ["{DB1}"]}}"#))
        );
        assert_eq!(
            one(aff("shard", "==", "2", "exact", false)),
            loc(&format!(r#"{{"strict": true, "near": ["{WEB3}"]}}"#))
        );
        assert_eq!(
            one(aff("shard", "==", "/^2$/", "re", false)),
            loc(&format!(r#"{{"strict": true, "near": ["{WEB3}"]}}"#))
        );
    }

    #[test]
    fn uuids_and_full_docker_ids() {
        let idx = index(json!({
            DOCKER_UUID: {"owner_uuid": OWNER, "state": "running", "docker": true,
                          "internal_metadata": {"docker:id": DOCKER_ID}}
        }));
        // A uuid is used as is, even for a VM nobody has.
        assert_eq!(
            run(&idx, &[aff("instance", "==", DB1, "exact", false)]),
            loc(&format!(r#"{{"strict": true, "near": ["{DB1}"]}}"#))
        );
        assert_eq!(
            run(&idx, &[aff("container", "==", DOCKER_ID, "exact", false)]),
            loc(&format!(r#"{{"strict": true, "near": ["{DOCKER_UUID}"]}}"#))
        );
        let other = DOCKER_ID.replace("c8fe", "c8ff");
        assert!(run(&idx, &[aff("container", "==", &other, "exact", false)]).is_err());
        // Another owner's VM is not found.
        let theirs = index(json!({DOCKER_UUID: {"owner_uuid": OTHER, "docker": true,
                                                "internal_metadata": {"docker:id": DOCKER_ID}}}));
        assert_eq!(run(&theirs, &[aff("container", "!=", DOCKER_ID, "exact", false)]), Ok(None));
    }

    #[test]
    fn mixed_hard_and_soft_drops_the_soft_and_ignores_images() {
        let idx =
            index(json!({WEB3: {"owner_uuid": OWNER, "alias": "web"}, DB1: {"owner_uuid": OWNER, "alias": "db"}}));
        let affs = [
            aff("image", "==", "nothing-like-this", "exact", false),
            aff("instance", "==", "db", "exact", true),
            aff("instance", "!=", "web", "exact", false),
            aff("instance", "!=", "web", "exact", false),
        ];
        assert_eq!(run(&idx, &affs), loc(&format!(r#"{{"strict": true, "far": ["{WEB3}", "{WEB3}"]}}"#)));
    }

    #[test]
    fn null_tag_with_regex_is_an_error() {
        let idx = index(json!({WEB3: {"owner_uuid": OWNER, "tags": {"role": null}}}));
        assert!(run(&idx, &[aff("role", "!=", "/x/", "re", false)]).is_err());
    }
}
